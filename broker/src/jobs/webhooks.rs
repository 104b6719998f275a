//! Announces pending approvals to a webhook (`[approvals] webhook_url`).
//!
//! The announcement is written to the outbox (`store/webhooks.rs`) in the
//! transaction that opened the approval; this worker POSTs it until the
//! receiver answers 2xx, with backoff, across restarts. The body says who asks
//! for what and links to the console; it never holds a token. With a secret
//! the body is signed: `Tessera-Signature: t=UNIX,v1=HEX`, where HEX is
//! HMAC-SHA256(secret, "UNIX.DELIVERY.BODY") and DELIVERY is the
//! `Tessera-Delivery` header — the receiver recomputes it, compares in
//! constant time, refuses a stale `t` and deduplicates on the delivery id
//! (docs/approvals.md).

use crate::app::{App, AppState};
use crate::config::approvals::{Webhook, WebhookFormat};
use crate::store::approvals::ApprovalRecord;
use crate::store::runs::RunRecord;
use crate::store::webhooks::{self, Attempted, Due};
use hmac::{Hmac, Mac};
use secrecy::ExposeSecret;
use sha2::Sha256;
use std::fmt::Write as _;
use std::time::Duration;

/// Most notifications one pass sends.
const BATCH: i64 = 32;

/// The outbox body announcing `record` of `run`, when a webhook is configured.
pub fn announcement(app: &App, run: &RunRecord, record: &ApprovalRecord) -> Option<String> {
    let webhook = app.config.approvals.webhook.as_ref()?;
    let link = app
        .config
        .approvals
        .console_url
        .as_ref()
        .map(|c| format!("{}/#/approvals", c.trim_end_matches('/')));
    let arguments: serde_json::Value =
        serde_json::from_str(&record.arguments).unwrap_or(serde_json::Value::Null);
    let body = match webhook.format {
        WebhookFormat::Tessera => serde_json::json!({
            "event": crate::audit::events::APPROVAL_REQUESTED,
            "approval_id": record.id,
            "run_id": run.id,
            "user": run.user,
            "task": { "id": run.task_id, "kind": run.task_kind },
            "runtime": run.runtime_name,
            "action": record.action,
            "resource": record.resource,
            "arguments": arguments,
            "args": record.args_hash,
            "approvers": record.approvers,
            "expires_at": crate::clock::rfc3339(record.expires_at),
            "console_url": link,
        }),
        WebhookFormat::Slack => {
            let mut args = record.arguments.clone();
            if args.len() > 500 {
                args.truncate(args.floor_char_boundary(500));
                args.push('…');
            }
            let e = slack_text;
            let mut text = format!(
                "Approval needed ({}): {} wants `{}` on `{}` (run {}, task {} {}, runtime {})\nArguments:\n```{}```\nExpires {}",
                e(&record.approvers),
                e(&run.user),
                e(&record.action),
                e(&record.resource),
                run.id,
                e(&run.task_kind),
                e(&run.task_id),
                e(&run.runtime_name),
                e(&args),
                crate::clock::rfc3339(record.expires_at),
            );
            if let Some(link) = &link {
                let _ = write!(text, "\n<{link}|Review in the Tessera console>");
            }
            serde_json::json!({ "text": text, "unfurl_links": false, "unfurl_media": false })
        }
    };
    Some(body.to_string())
}

/// Text an agent chose, made inert in a Slack message: `&`, `<` and `>` are
/// escaped as Slack asks (no links, mentions or `<!channel>`), and backticks
/// become `ˋ` so the text cannot close its code span.
fn slack_text(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('`', "ˋ")
}

/// `t=UNIX,v1=HEX` for `body` sent at `t` as delivery `delivery`: HMAC-SHA256
/// over `"{t}.{delivery}.{body}"`, so neither the time nor the delivery id
/// (what a receiver deduplicates on) can be changed on a replay.
pub fn signature(secret: &str, t: i64, delivery: &str, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
        .expect("HMAC accepts a key of any length");
    mac.update(format!("{t}.{delivery}.{body}").as_bytes());
    let mut hex = String::with_capacity(64);
    for b in mac.finalize().into_bytes() {
        let _ = write!(hex, "{b:02x}");
    }
    format!("t={t},v1={hex}")
}

/// Seconds before attempt `attempts + 1`: 2, 4, 8 … capped at 30 minutes.
fn backoff(attempts: i64) -> i64 {
    (1i64 << attempts.clamp(1, 11)).min(1800)
}

/// Delivers what is due; returns how many were delivered.
pub async fn run_once(app: &App, client: &reqwest::Client, webhook: &Webhook) -> usize {
    let now = app.clock.now();
    let due = match webhooks::due(&app.store, now, BATCH).await {
        Ok(due) => due,
        Err(e) => {
            tracing::warn!(error = %e, "webhook outbox unreadable; will retry");
            return 0;
        }
    };
    let mut delivered = 0;
    for d in due {
        let result = send(client, webhook, &d, app.clock.now()).await;
        let ok = result.is_ok();
        if let Err(e) = &result {
            tracing::warn!(delivery = %d.id, attempt = d.attempts + 1, error = %e, "webhook delivery failed; will retry");
        }
        let attempted = Attempted {
            id: d.id.clone(),
            delivered: ok,
            error: result.err(),
            retry_in: backoff(d.attempts + 1),
        };
        if let Err(e) = app.store.writer().submit(attempted).await {
            tracing::warn!(error = %e, "cannot record a webhook attempt");
        }
        delivered += usize::from(ok);
    }
    delivered
}

async fn send(
    client: &reqwest::Client,
    webhook: &Webhook,
    d: &Due,
    now: i64,
) -> Result<(), String> {
    let mut req = client
        .post(webhook.url.expose_secret())
        .header("content-type", "application/json")
        .header("tessera-event", &d.event)
        .header("tessera-delivery", &d.id)
        .timeout(Duration::from_secs(10));
    if let Some(secret) = &webhook.secret {
        req = req.header(
            "tessera-signature",
            signature(secret.expose_secret(), now, &d.id, &d.body),
        );
    }
    // The error's text never carries the URL (it may hold a credential).
    let resp = req
        .body(d.body.clone())
        .send()
        .await
        .map_err(|e| format!("cannot send: {}", e.without_url()))?;
    if resp.status().is_success() {
        Ok(())
    } else {
        Err(format!("the receiver answered {}", resp.status().as_u16()))
    }
}

/// The worker: woken when an approval is opened, else every second.
pub async fn run(app: AppState) {
    let Some(webhook) = app.config.approvals.webhook.clone() else {
        return;
    };
    let client = match crate::http_client::no_redirects() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot build the webhook HTTP client");
            return;
        }
    };
    let mut stopping = app.stopping.subscribe();
    loop {
        run_once(&app, &client, &webhook).await;
        tokio::select! {
            _ = app.webhook_wakeup.notified() => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_hmac_of_time_dot_body() {
        // RFC 4231 style check against an independent computation is in the
        // API test (the receiver verifies); here the shape and determinism.
        let k = "k".repeat(32);
        let a = signature(&k, 1_700_000_000, "d1", "{}");
        assert!(a.starts_with("t=1700000000,v1="));
        assert_eq!(a.len(), "t=1700000000,v1=".len() + 64);
        assert_eq!(a, signature(&k, 1_700_000_000, "d1", "{}"));
        assert_ne!(a, signature(&k, 1_700_000_001, "d1", "{}"));
        assert_ne!(a, signature(&k, 1_700_000_000, "d2", "{}"));
    }

    #[test]
    fn an_agents_text_cannot_mark_up_a_slack_message() {
        let e = slack_text("`x` <!channel> <https://evil|console> & co");
        assert_eq!(
            e,
            "ˋxˋ &lt;!channel&gt; &lt;https://evil|console&gt; &amp; co"
        );
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        assert_eq!(backoff(1), 2);
        assert_eq!(backoff(2), 4);
        assert_eq!(backoff(30), 1800);
    }
}
