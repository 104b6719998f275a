//! `tessera status`: whether the broker answers, is ready, and accepts the
//! admin token; its signing keys, the policy version published, and every
//! replica sharing its store.
//!
//! Why its own file: the family owns its clap type and its run; what it
//! prints about replicas (written to the store by other processes, so shown,
//! never interpreted by the terminal) is this command's alone.

use super::remote::{admin, print_json, said, Remote};
use clap::Args;
use tessera_client::types::BrokerStatus;

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub remote: Remote,
}

/// `tessera status`: reachable, ready, token accepted.
pub async fn run(args: StatusArgs) -> anyhow::Result<()> {
    let remote = args.remote;
    let client = admin(&remote)?;
    let ready = client.ready().await.map_err(said)?;
    let keys = client.keys().await.map_err(said)?;
    let replicas = client.status().await.map_err(said)?;
    // As the client reached it: `host:port` is shown as `http://host:port`.
    let addr = tessera_client::broker_address(&remote.addr);
    let active = keys
        .keys
        .iter()
        .find(|k| k.state == "active")
        .map(|k| k.kid.clone());
    let scheduled = keys.keys.iter().find(|k| k.state == "scheduled");
    if remote.json {
        print_json(&serde_json::json!({
            "addr": addr,
            "ready": ready.status == "ready",
            "reasons": ready.reasons,
            "admin_token": "accepted",
            "signing_keys": keys.keys.len(),
            "active_kid": active,
            "scheduled_kid": scheduled.map(|k| &k.kid),
            "store": replicas.store,
            "published_policy": replicas.published_policy,
            "unsealed_versions": replicas.unsealed_versions,
            "replicas": replicas.replicas,
        }));
        return Ok(());
    }
    println!("broker:      {addr} ({})", ready.status);
    for r in &ready.reasons {
        println!("  not ready: {} ({})", r.code, r.message);
    }
    println!("admin token: accepted");
    println!(
        "signing keys: {} (active {})",
        keys.keys.len(),
        active.as_deref().unwrap_or("none")
    );
    if let Some(k) = scheduled {
        println!("  {} signs from {}", k.kid, k.signs_from);
    }
    print_store(&replicas);
    Ok(())
}

/// The policy published, the store, and every replica sharing it.
fn print_store(replicas: &BrokerStatus) {
    match &replicas.published_policy {
        Some(p) => println!(
            "policy:      version {} (sha256 {}), published {} by {} ({})",
            p.version,
            short(&p.sha256),
            p.published_at,
            short(&p.replica),
            shown(&p.trigger)
        ),
        None => println!("policy:      no version published"),
    }
    if !replicas.unsealed_versions.is_empty() {
        println!(
            "  REFUSED versions {:?}: not sealed under the KEK (written to the store directly)",
            replicas.unsealed_versions
        );
    }
    println!("store:       {}", replicas.store);
    println!("replicas:    {}", replicas.replicas.len());
    for r in &replicas.replicas {
        let behind = match (&replicas.published_policy, r.policy_version) {
            (Some(p), Some(v)) if v < p.version => " BEHIND",
            _ => "",
        };
        println!(
            "  {}{} {}:{} v{} policy {} (sha256 {}){behind} key {} up {}s{}",
            short(&r.id),
            if r.this { "*" } else { " " },
            shown(&r.machine),
            r.pid,
            shown(r.software.as_deref().unwrap_or("?")),
            r.policy_version.map_or("?".into(), |v| v.to_string()),
            r.policy_sha256.as_deref().map_or("?".into(), short),
            r.signing_kid.as_deref().map_or("?".into(), short),
            r.uptime_seconds,
            if r.live { "" } else { " (no heartbeat)" },
        );
    }
}

/// What other replicas wrote to the store is shown, never interpreted by the
/// terminal: control characters become '?'.
fn shown(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// The first 12 characters of an id or a hash, [`shown`].
fn short(s: &str) -> String {
    shown(&s.chars().take(12).collect::<String>())
}
