//! `[approvals]`: where pending approvals are announced, and where the
//! console is, for the link in the announcement.

use super::{err, ConfigError};
use serde::Deserialize;
use std::path::PathBuf;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawApprovals {
    webhook_url: Option<String>,
    webhook_secret_file: Option<PathBuf>,
    webhook_format: Option<String>,
    console_url: Option<String>,
}

/// The body a webhook receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookFormat {
    /// Tessera's own JSON (docs/approvals.md).
    Tessera,
    /// A Slack incoming-webhook message (`{"text": …}`).
    Slack,
}

#[derive(Clone)]
pub struct Webhook {
    /// POSTed each announcement, retried from the outbox until it answers 2xx.
    /// Secret: an incoming-webhook URL is itself a credential (never logged).
    pub url: secrecy::SecretString,
    /// HMAC-SHA256 key for `Tessera-Signature` (read from `webhook_secret_file`).
    pub secret: Option<secrecy::SecretString>,
    pub format: WebhookFormat,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("url", &"[redacted]")
            .field("secret", &self.secret.as_ref().map(|_| "[redacted]"))
            .field("format", &self.format)
            .finish()
    }
}

#[derive(Debug, Clone, Default)]
pub struct ApprovalsConfig {
    pub webhook: Option<Webhook>,
    /// The console's address as approvers reach it (`https://tessera.example/console`).
    pub console_url: Option<String>,
}

fn is_url(url: &str) -> bool {
    super::is_safe_destination(url)
}

pub(super) fn resolve(raw: RawApprovals) -> Result<ApprovalsConfig, ConfigError> {
    let format = match raw.webhook_format.as_deref() {
        None | Some("tessera") => WebhookFormat::Tessera,
        Some("slack") => WebhookFormat::Slack,
        Some(_) => {
            return Err(err(
                "approvals.webhook_format",
                "must be \"tessera\" or \"slack\"",
            ))
        }
    };
    if let Some(url) = &raw.console_url {
        if !is_url(url) {
            return Err(err(
                "approvals.console_url",
                "must be an https:// URL (http:// only to a loopback address)",
            ));
        }
    }
    let webhook = match raw.webhook_url {
        None if raw.webhook_secret_file.is_some() => {
            return Err(err(
                "approvals.webhook_secret_file",
                "needs approvals.webhook_url",
            ))
        }
        None => None,
        Some(url) if !is_url(&url) => {
            return Err(err(
                "approvals.webhook_url",
                "must be an https:// URL (http:// only to a loopback address)",
            ))
        }
        Some(url) => {
            let secret = match &raw.webhook_secret_file {
                None => None,
                Some(path) => {
                    let text = std::fs::read_to_string(path).map_err(|e| {
                        err(
                            "approvals.webhook_secret_file",
                            format!("cannot read {}: {e}", path.display()),
                        )
                    })?;
                    let text = text.trim().to_owned();
                    if text.len() < 32 {
                        return Err(err(
                            "approvals.webhook_secret_file",
                            "the secret must be at least 32 characters",
                        ));
                    }
                    Some(secrecy::SecretString::from(text))
                }
            };
            Some(Webhook {
                url: secrecy::SecretString::from(url),
                secret,
                format,
            })
        }
    };
    Ok(ApprovalsConfig {
        webhook,
        console_url: raw.console_url,
    })
}
