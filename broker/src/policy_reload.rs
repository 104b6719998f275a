//! Live policy reload: on SIGHUP, on `POST /v1/admin/policy/reload`, and when the
//! files in the policy directory change.
//!
//! Why here and not in [`crate::policy`]: a reload is an operational event with an
//! audit row and a fail-closed rule, not a policy-language concern. The rules:
//! - a new set is loaded and validated completely before anything changes; a valid
//!   set is swapped in whole ([`crate::policy::in_force::PolicyInForce::replace_engine`]), so a request
//!   sees either the old set or the new one, never a mix;
//! - an invalid set is rejected with its errors and the old set stays in force;
//! - every reload or rejection is audited *before* it takes effect: when the audit
//!   row cannot be written (store down), nothing is swapped — an unattributable
//!   policy change is worse than a delayed one;
//! - reloads are serialised, so two triggers at once cannot interleave;
//! - a valid set is published as the next policy version for every replica
//!   ([`crate::policy_versions`]) in the transaction that audits it; files
//!   that already are the newest version publish nothing (and a file watch
//!   seeing what another replica published is not audited again);
//! - a reload that tightens policy revokes every live capability the new set would
//!   no longer issue ([`crate::grant::reauthorize::stale`]) and says how many, in its
//!   result and its audit row.

use crate::app::App;
use crate::audit::{events, AuditEvent};
use crate::policy::files::{fingerprint, PolicyFiles};
use crate::policy::PolicyLoadError;
use crate::store::writer::AppendAudit;
use crate::store::StoreError;

/// What a successful reload did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Reloaded {
    pub policies: usize,
    /// SHA-256 over the directory's policy files, as loaded.
    pub sha256: String,
    /// The published version these files are.
    pub version: i64,
    /// Live capabilities the new policy would no longer issue, revoked by this
    /// reload (their leases with them).
    pub revoked: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("{0}")]
    Invalid(PolicyLoadError),
    #[error("the reload could not be audited, so it was not applied: {0}")]
    Store(StoreError),
}

/// Who asked: `admin`, `signal` or `watch`; becomes the audit row's actor.
pub type Trigger = &'static str;

/// Longest detail kept in an audit row for a rejected set (the full list is logged
/// and returned to the admin who asked).
const MAX_AUDIT_DETAIL: usize = 500;

/// Reloads the policy directory named in the configuration.
pub async fn reload(
    app: &App,
    trigger: Trigger,
    request_id: Option<String>,
) -> Result<Reloaded, ReloadError> {
    let _one_at_a_time = app.policy_in_force.reload_lock().lock().await;
    let dir = app.config.policy_dir.clone();
    let loaded = tokio::task::spawn_blocking(move || match PolicyFiles::read_dir(&dir) {
        Ok(files) => {
            let sha256 = files.sha256();
            (files.compile(&dir).map(|engine| (engine, files)), sha256)
        }
        Err(e) => (Err(e), fingerprint(&dir)),
    })
    .await;
    let (result, sha256) = match loaded {
        Ok(pair) => pair,
        Err(join) => {
            tracing::error!(error = %join, "policy load task failed");
            return Err(ReloadError::Invalid(PolicyLoadError {
                diagnostics: vec![crate::policy::PolicyDiagnostic {
                    severity: crate::policy::Severity::Error,
                    file: app.config.policy_dir.display().to_string(),
                    line: 0,
                    column: 0,
                    message: "the policy load failed unexpectedly; see the broker log".into(),
                    hint: None,
                }],
            }));
        }
    };
    let mut audit = AuditEvent::new(events::POLICY_RELOADED, trigger, "allow");
    let audit_request_id = request_id.clone();
    audit.request_id = request_id;
    match result {
        Ok((engine, files)) => {
            let policies = engine.policy_count();
            let decision_cache = engine.decision_cache_summary();
            // Which live capabilities the new set would no longer issue: known
            // before the swap, so the audit row can say how many it revokes.
            let now = app.clock.now();
            let stale = match crate::grant::reauthorize::stale(
                &app.store,
                &engine,
                &app.config.backends,
                &app.config.limits,
                now,
            )
            .await
            {
                Ok(stale) => stale,
                Err(e) => {
                    app.metrics.background("policy_reload", "unaudited");
                    return Err(ReloadError::Store(e));
                }
            };
            let revoked = stale.len();
            audit.detail = Some(format!(
                "policies={policies} sha256={sha256} revoked={revoked}"
            ));
            // A watch seeing files another replica already published is
            // not a second change; an administrator's reload always is audited.
            let audit_unchanged = trigger != "watch";
            let published = match crate::policy_versions::publish(
                app,
                &files,
                &sha256,
                trigger,
                audit,
                audit_unchanged,
            )
            .await
            {
                Ok(p) => p,
                Err(e) => {
                    app.metrics.background("policy_reload", "unaudited");
                    return Err(ReloadError::Store(e));
                }
            };
            let version = published.version();
            app.policy_in_force.replace_engine(engine);
            app.policy_in_force
                .set_version(crate::policy::in_force::InForce {
                    version,
                    sha256: sha256.clone(),
                });
            app.health.policy_loaded();
            crate::grant::reauthorize::revoke_stale(app, &stale, audit_request_id).await;
            app.metrics.background("policy_reload", "reloaded");
            tracing::info!(trigger, version, policies, %sha256, revoked, %decision_cache, "policy reloaded");
            Ok(Reloaded {
                policies,
                sha256,
                version,
                revoked,
            })
        }
        Err(errors) => {
            audit.event = events::POLICY_RELOAD_REJECTED;
            audit.decision = "deny";
            audit.reason = Some("invalid_policy".into());
            let mut detail = format!(
                "errors={} sha256={sha256} first={}",
                errors.diagnostics.len(),
                errors
                    .diagnostics
                    .first()
                    .map(|d| d.to_string())
                    .unwrap_or_default()
            );
            truncate(&mut detail, MAX_AUDIT_DETAIL);
            audit.detail = Some(detail);
            tracing::warn!(trigger, errors = %errors, "policy reload rejected; the previous policy stays in force");
            // Where, not what: /readyz is unauthenticated, and the message of
            // a policy error can quote the policy (the log and the admin's
            // answer have it whole).
            app.health.policy_rejected(
                errors
                    .diagnostics
                    .first()
                    .map(|d| {
                        let file = std::path::Path::new(&d.file)
                            .file_name()
                            .map(|f| f.to_string_lossy().into_owned())
                            .unwrap_or_default();
                        format!(
                            "{} error(s), the first in {file}:{}:{}",
                            errors.diagnostics.len(),
                            d.line,
                            d.column
                        )
                    })
                    .unwrap_or_else(|| "no policy could be loaded".into()),
            );
            app.metrics.background("policy_reload", "rejected");
            if let Err(e) = app.store.writer().submit(AppendAudit(audit)).await {
                return Err(ReloadError::Store(e));
            }
            Err(ReloadError::Invalid(errors))
        }
    }
}

fn truncate(s: &mut String, max: usize) {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
}

/// Reloads whenever the directory's fingerprint changes and then holds still for
/// one more `interval`.
/// A rejected set is not retried until the files change again; a reload that
/// could not be audited is retried on the next tick.
pub async fn watch(app: std::sync::Arc<App>, interval: std::time::Duration) {
    let dir = app.config.policy_dir.clone();
    let mut seen = {
        let dir = dir.clone();
        tokio::task::spawn_blocking(move || fingerprint(&dir))
            .await
            .ok()
    };
    let mut settling: Option<String> = None;
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let dir = dir.clone();
        let now = tokio::task::spawn_blocking(move || fingerprint(&dir))
            .await
            .ok();
        if now.is_none() || now == seen {
            settling = None;
            continue;
        }
        // A change is loaded only once the files have stayed the same for a whole
        // tick: an editor that truncates and then writes (or writes a directory of
        // files one by one) must not have its half-written state put in force.
        if settling != now {
            settling = now;
            continue;
        }
        settling = None;
        match reload(&app, "watch", None).await {
            Ok(_) | Err(ReloadError::Invalid(_)) => seen = now,
            Err(ReloadError::Store(e)) => {
                tracing::error!(error = %e, "policy change seen but not applied: store unavailable");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_follows_content_and_ignores_other_files() {
        let dir = std::env::temp_dir().join(format!("tsr-fp-{}", crate::ids::new_id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.cedar"), "permit(principal, action, resource);").unwrap();
        let first = fingerprint(&dir);
        assert_eq!(first, fingerprint(&dir));
        std::fs::write(dir.join("notes.txt"), "ignored").unwrap();
        assert_eq!(first, fingerprint(&dir));
        std::fs::write(dir.join("a.cedar"), "forbid(principal, action, resource);").unwrap();
        assert_ne!(first, fingerprint(&dir));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_ne!(first, fingerprint(&dir));
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        let mut s = "é".repeat(10);
        truncate(&mut s, 5);
        assert_eq!(s, "éé");
    }
}
