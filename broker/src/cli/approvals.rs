//! `tessera approvals list | show | approve | deny`: the approvals policy asks
//! for, and a person's decision on one. (Approver keys are minted by
//! `tessera approvers`, [`super::approvers`].)
//!
//! Who is asking decides which API is called: with an approver key
//! (`--approver-key-file`, `TESSERA_APPROVER_KEY_FILE`) the approver's own
//! endpoints, which see only what that approver may decide; else the admin
//! token's, which see everything and may deny but never approve — an approval
//! must name a person.

use super::remote::{admin, admin_with, print_json, said, Remote};
use super::table::print_table;
use anyhow::Context;
use clap::{Args, Subcommand};
use secrecy::SecretString;
use std::path::PathBuf;
use tessera_client::types::{Approval, ApprovalListQuery};
use tessera_client::AdminClient;

#[cfg(test)]
mod tests {
    #[test]
    fn an_agents_text_is_spelled_out() {
        assert_eq!(
            super::shown("a\u{202e}b\u{1b}[2J\u{200b}"),
            "a\\u{202e}b\\u{001b}[2J\\u{200b}"
        );
        assert_eq!(super::shown("plain é"), "plain é");
    }
}

/// Whose credential decides (see the module docs).
#[derive(Debug, Args)]
pub struct As {
    /// File holding an approver key (`tsr_apr_…`); without it, the admin token is used.
    #[arg(long, env = "TESSERA_APPROVER_KEY_FILE")]
    pub approver_key_file: Option<PathBuf>,
    #[command(flatten)]
    pub remote: Remote,
}

#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    #[command(
        after_help = "Examples:\n  tessera approvals list\n  tessera approvals list --status all --run RUN_ID --json"
    )]
    /// List approvals (pending by default).
    List {
        /// pending, approved, denied, expired, cancelled or all.
        #[arg(long)]
        status: Option<String>,
        /// Only this run's.
        #[arg(long)]
        run: Option<String>,
        #[command(flatten)]
        who: As,
    },
    #[command(after_help = "Examples:\n  tessera approvals show APPROVAL_ID")]
    /// Show one approval: who asks, the full arguments, the rules, the decisions.
    Show {
        /// The approval's id.
        id: String,
        #[command(flatten)]
        who: As,
    },
    #[command(
        after_help = "Examples:\n  tessera approvals approve APPROVAL_ID --approver-key-file dana.key --comment 'matches CHG-42'\n  TESSERA_APPROVER_KEY_FILE=dana.key tessera approvals approve APPROVAL_ID"
    )]
    /// Approve (needs an approver key).
    Approve {
        /// The approval's id.
        id: String,
        /// Why, for the audit log and the requester.
        #[arg(long)]
        comment: Option<String>,
        #[command(flatten)]
        who: As,
    },
    #[command(
        after_help = "Examples:\n  tessera approvals deny APPROVAL_ID --comment 'not during the freeze'"
    )]
    /// Deny (an approver key, or the admin token).
    Deny {
        /// The approval's id.
        id: String,
        /// Why, for the audit log and the requester.
        #[arg(long)]
        comment: Option<String>,
        #[command(flatten)]
        who: As,
    },
}

fn client(who: &As) -> anyhow::Result<(AdminClient, bool)> {
    match &who.approver_key_file {
        Some(path) => {
            let key = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read approver key file {}", path.display()))?;
            let key = SecretString::from(key.trim());
            Ok((admin_with(&who.remote, key)?, true))
        }
        None => Ok((admin(&who.remote)?, false)),
    }
}

pub async fn run(cmd: ApprovalsCommand) -> anyhow::Result<()> {
    match cmd {
        ApprovalsCommand::List { status, run, who } => {
            let (c, as_approver) = client(&who)?;
            let query = ApprovalListQuery {
                status,
                run_id: run.map(Into::into),
                limit: None,
            };
            let v = c.approvals(&query, as_approver).await.map_err(said)?;
            if who.remote.json {
                print_json(&v);
                return Ok(());
            }
            let rows: Vec<serde_json::Value> = v
                .approvals
                .iter()
                .map(|a| {
                    serde_json::json!({
                        "approval_id": a.approval_id,
                        "status": a.status.as_str(),
                        "user": a.user,
                        "action": a.action,
                        "resource": a.resource,
                        "approvers": rules(a),
                        "expires_at": a.expires_at,
                    })
                })
                .collect();
            print_table(
                &who.remote,
                &serde_json::json!({ "approvals": rows }),
                "approvals",
                &[
                    "approval_id",
                    "status",
                    "user",
                    "action",
                    "resource",
                    "approvers",
                    "expires_at",
                ],
            );
        }
        ApprovalsCommand::Show { id, who } => {
            let (c, as_approver) = client(&who)?;
            let a = c.approval(&id, as_approver).await.map_err(said)?;
            show(&who.remote, &a);
        }
        ApprovalsCommand::Approve { id, comment, who } => {
            let (c, as_approver) = client(&who)?;
            if !as_approver {
                anyhow::bail!(
                    "approving needs an approver key (--approver-key-file or \
                     TESSERA_APPROVER_KEY_FILE): the admin token can deny, never approve"
                );
            }
            let a = c.approve(&id, comment).await.map_err(said)?;
            show(&who.remote, &a);
        }
        ApprovalsCommand::Deny { id, comment, who } => {
            let (c, as_approver) = client(&who)?;
            let a = c.deny(&id, comment, as_approver).await.map_err(said)?;
            show(&who.remote, &a);
        }
    }
    Ok(())
}

fn rules(a: &Approval) -> String {
    a.approvers
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// `text` with every control, bidirectional, separator or invisible character
/// spelled out (`\u{202e}`): what an agent wrote can neither drive the terminal
/// nor read differently from what it is. (The broker refuses them in arguments
/// and comments already; this holds for a broker that did not.)
fn shown(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() || crate::names::is_deceptive(c) {
                format!("\\u{{{:04x}}}", c as u32)
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn show(remote: &Remote, a: &Approval) {
    if remote.json {
        print_json(a);
        return;
    }
    println!("approval  {}  {}", a.approval_id, a.status.as_str());
    println!(
        "asked by  user {}  run {}  task {} ({})  runtime {}",
        a.user, a.run_id, a.task_id, a.task_kind, a.runtime
    );
    println!("wants     {} on {}", a.action, a.resource);
    println!("approvers {}  (policy {})", rules(a), a.policy);
    println!("expires   {}", a.expires_at);
    println!("arguments (sha256 {}):", a.args);
    let pretty = serde_json::to_string_pretty(&a.arguments).unwrap_or_default();
    for line in pretty.lines() {
        println!("  {}", shown(line));
    }
    for d in &a.decisions {
        println!(
            "decision  {} by {} ({}) at {}{}",
            d.decision,
            d.approver,
            d.user.as_deref().unwrap_or("admin"),
            d.at,
            d.comment
                .as_deref()
                .map(|c| format!(": {}", shown(c)))
                .unwrap_or_default()
        );
    }
    match a.capability_id.as_deref() {
        // A gateway request redeems an approval as its audit row's request id.
        Some(id) if id.starts_with("req_") => println!("redeemed  by the gateway request {id}"),
        Some(cap) => println!("redeemed  capability {cap}"),
        None => {}
    }
}
