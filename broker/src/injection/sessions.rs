//! What a run has for credential injection, in this process's memory only: its
//! CA (`ca`), its placeholders, and the AWS credentials its SigV4 rules sign
//! with. Ending the run drops all of it ([`Sessions::forget`]): the CA's key is
//! gone, the placeholders name nothing, the credentials are no longer held.
//!
//! A placeholder is `tsr_ph_` and 43 random characters, one per run and rule:
//! what a tool puts where an SDK insists on an API key. It is worth nothing
//! outside this gateway and this run — the gateway strips it and injects the
//! rule's credential — and it is refused, audited, wherever else it shows up.

use super::ca::RunCa;
use crate::backends::http::HttpConfig;
use crate::config::{BackendConfig, Config};
use secrecy::ExposeSecret;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub const PLACEHOLDER_PREFIX: &str = "tsr_ph_";

/// MiB of one run's request bodies being read to be signed (the gateway's
/// whole share is `gateway::inject::intercept::SIGNED_BODIES_MIB`).
pub const SIGNED_BODIES_MIB_PER_RUN: usize = 64;

/// One placeholder of a run: for which rule, and which variable holds it.
#[derive(Debug, Clone)]
pub struct Placeholder {
    pub backend: String,
    pub env: String,
    pub value: String,
}

/// AWS credentials a SigV4 rule signs with, and until when.
#[derive(Clone)]
pub struct AwsSession {
    pub credentials: aws_credential_types::Credentials,
    pub expires_at: i64,
}

pub struct RunSession {
    pub run_id: String,
    pub ca: RunCa,
    pub placeholders: Vec<Placeholder>,
    /// By `aws-sts` backend name.
    pub aws: tokio::sync::Mutex<HashMap<String, AwsSession>>,
    /// MiB of this run's request bodies being read to be signed: one run
    /// cannot hold the whole gateway's share (`intercept::SIGNED_BODIES_MIB`).
    pub signed_bodies: Arc<tokio::sync::Semaphore>,
}

/// Every injection rule, and every run's session.
pub struct Sessions {
    /// `(backend name, rule)`, in name order.
    pub rules: Vec<(String, HttpConfig)>,
    subtrees: Vec<String>,
    runs: Mutex<HashMap<String, Arc<RunSession>>>,
    /// Placeholder value → (run, backend).
    placeholders: Mutex<HashMap<String, (String, String)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl Sessions {
    pub fn new(config: &Config) -> Sessions {
        let rules: Vec<(String, HttpConfig)> = config
            .backends
            .iter()
            .filter_map(|(name, b)| match b {
                BackendConfig::Http(h) => Some((name.clone(), h.clone())),
                _ => None,
            })
            .collect();
        let mut subtrees: Vec<String> = rules
            .iter()
            .flat_map(|(_, r)| r.hosts.iter().map(|h| h.subtree().to_owned()))
            .collect();
        subtrees.sort();
        subtrees.dedup();
        Sessions {
            rules,
            subtrees,
            runs: Mutex::new(HashMap::new()),
            placeholders: Mutex::new(HashMap::new()),
        }
    }

    /// Whether any injection rule is configured.
    pub fn enabled(&self) -> bool {
        !self.rules.is_empty()
    }

    /// The rule for `host:port`, if one is for it.
    pub fn rule_for(&self, host: &str, port: u16) -> Option<&(String, HttpConfig)> {
        self.rules.iter().find(|(_, r)| r.is_for(host, port))
    }

    /// The DNS subtrees the run CAs are constrained to.
    pub fn subtrees(&self) -> &[String] {
        &self.subtrees
    }

    /// The run's session, made on first use. The caller has checked that the
    /// run is active.
    pub fn open(&self, run_id: &str, now: i64, expires_at: i64) -> Result<Arc<RunSession>, String> {
        if let Some(s) = lock(&self.runs).get(run_id) {
            return Ok(s.clone());
        }
        let ca = RunCa::new(run_id, &self.subtrees, now, expires_at)?;
        let placeholders: Vec<Placeholder> = self
            .rules
            .iter()
            .filter_map(|(name, r)| {
                let env = r.placeholder_env.clone()?;
                let value = crate::ids::new_secret(PLACEHOLDER_PREFIX)
                    .expose_secret()
                    .to_owned();
                Some(Placeholder {
                    backend: name.clone(),
                    env,
                    value,
                })
            })
            .collect();
        let session = Arc::new(RunSession {
            run_id: run_id.to_owned(),
            ca,
            placeholders,
            aws: tokio::sync::Mutex::new(HashMap::new()),
            signed_bodies: Arc::new(tokio::sync::Semaphore::new(SIGNED_BODIES_MIB_PER_RUN)),
        });
        let mut runs = lock(&self.runs);
        // Two first uses at once: the first one in wins, the other is dropped.
        if let Some(s) = runs.get(run_id) {
            return Ok(s.clone());
        }
        let mut by_value = lock(&self.placeholders);
        for p in &session.placeholders {
            by_value.insert(p.value.clone(), (run_id.to_owned(), p.backend.clone()));
        }
        runs.insert(run_id.to_owned(), session.clone());
        Ok(session)
    }

    /// Drops the run's CA, placeholders and AWS credentials.
    pub fn forget(&self, run_id: &str) {
        let Some(session) = lock(&self.runs).remove(run_id) else {
            return;
        };
        let mut by_value = lock(&self.placeholders);
        for p in &session.placeholders {
            by_value.remove(&p.value);
        }
    }

    /// Drops the sessions of runs that expired by `now`.
    pub fn forget_expired(&self, now: i64) {
        let expired: Vec<String> = lock(&self.runs)
            .iter()
            .filter(|(_, s)| s.ca.expires_at <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            self.forget(&id);
        }
    }

    /// Whose placeholder `value` is: `(run, backend)`.
    pub fn placeholder_owner(&self, value: &str) -> Option<(String, String)> {
        lock(&self.placeholders).get(value).cloned()
    }
}

/// Every placeholder-shaped token in `text` (`tsr_ph_` and its 43 characters).
pub fn placeholders_in(text: &str) -> impl Iterator<Item = &str> {
    text.match_indices(PLACEHOLDER_PREFIX).map(move |(i, _)| {
        let rest = &text[i..];
        let end = rest
            .char_indices()
            .skip(PLACEHOLDER_PREFIX.len())
            .find(|(_, c)| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
            .map_or(rest.len(), |(j, _)| j);
        &rest[..end]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_found_wherever_they_are_written() {
        let p = "tsr_ph_abcDEF123-_x";
        for text in [
            p.to_owned(),
            format!("Bearer {p}"),
            format!("token={p}&x=1"),
            format!("{p},{p}"),
        ] {
            let found: Vec<&str> = placeholders_in(&text).collect();
            assert!(
                !found.is_empty() && found.iter().all(|f| *f == p),
                "{text}: {found:?}"
            );
        }
        assert_eq!(placeholders_in("nothing here").count(), 0);
    }
}
