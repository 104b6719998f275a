//! The admin CLI against a live broker: runtimes, runs (tables, JSON, states,
//! leases, paging), capability revocation, the audit trail (`tail`, `export`,
//! `verify`), policy reloads on SIGHUP and on request, and that the admin token
//! — worth more than any run token — goes to the broker only: no proxy, no
//! redirect, no `http://` off this machine. The operator's view of the broker
//! must match what happened, and the admin token must never leak on the way.

use crate::support::{
    cli, counting_proxy, redirect_to, sandbox_cmd, sandbox_run, start_dev_broker, stdout_of, BIN,
};
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_cli_reads_the_audit_lists_runs_and_reloads_on_sighup() {
    let broker = start_dev_broker().await;
    let rt: Value = serde_json::from_str(&stdout_of(&cli(
        &broker,
        &["runtimes", "create", "agents", "--json"],
    )))
    .unwrap();
    let key = rt["key"].as_str().unwrap();
    let http = reqwest::Client::new();
    let run: Value = http
        .post(format!("{}/v1/runs", broker.addr))
        .bearer_auth(key)
        .json(
            &json!({ "user": "alice", "task": { "id": "t-7", "kind": "summarize" }, "ttl": "30m" }),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run_id = run["run_id"].as_str().unwrap();
    let cap: Value = http
        .post(format!("{}/v1/capabilities", broker.addr))
        .bearer_auth(run["run_token"].as_str().unwrap())
        .json(&json!({ "action": "read", "resource": "svc-reports:reports/2026/q1.csv" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let cap_id = cap["capability_id"].as_str().unwrap();

    // runs list: a table by default, JSON on request.
    let table = stdout_of(&cli(&broker, &["runs", "list"]));
    assert!(table.starts_with("RUN_ID"), "{table}");
    assert!(
        table.contains(run_id) && table.contains("agents"),
        "{table}"
    );
    let listed: Value = serde_json::from_str(&stdout_of(&cli(
        &broker,
        &["runs", "list", "--user", "bob", "--json"],
    )))
    .unwrap();
    assert_eq!(listed["runs"], json!([]));

    let revoked = stdout_of(&cli(&broker, &["capabilities", "revoke", cap_id]));
    assert!(revoked.contains("revoked"), "{revoked}");

    // The run's story, oldest first, one line per row.
    let tail = stdout_of(&cli(&broker, &["audit", "tail", "--run", run_id]));
    let events: Vec<&str> = tail
        .lines()
        .map(|l| l.split_whitespace().nth(2).unwrap())
        .collect();
    assert_eq!(
        events,
        ["run.started", "capability.issued", "capability.revoked"],
        "{tail}"
    );
    assert!(
        tail.contains("user=alice") && tail.contains("task_id=t-7"),
        "{tail}"
    );

    // SIGHUP reloads the policy directory, attributed to the signal.
    let pid = broker.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap()
        .success());
    let mut reloaded = String::new();
    for _ in 0..100 {
        reloaded = stdout_of(&cli(
            &broker,
            &["audit", "tail", "--event", "policy.reloaded", "--json"],
        ));
        if !reloaded.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let row: Value = serde_json::from_str(reloaded.lines().next().expect("reloaded")).unwrap();
    assert_eq!(row["actor"], "signal");
    // And on request, from the admin CLI.
    let out = stdout_of(&cli(&broker, &["policy", "reload"]));
    assert!(out.contains("policies in force"), "{out}");
    let admin_reloads = stdout_of(&cli(
        &broker,
        &["audit", "tail", "--event", "policy.reloaded", "--json"],
    ));
    assert!(
        admin_reloads
            .lines()
            .any(|l| l.contains("\"actor\":\"admin\"")),
        "{admin_reloads}"
    );

    // Disabling the runtime ends its open run.
    let disabled = stdout_of(&cli(&broker, &["runtimes", "disable", "agents"]));
    assert!(disabled.contains("ended 1 open runs"), "{disabled}");

    // export: every row, as JSON lines in chain order, linked hash to hash.
    let export = stdout_of(&cli(&broker, &["audit", "export", "--since", "1h"]));
    let rows: Vec<Value> = export
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let verify: Value =
        serde_json::from_str(&stdout_of(&cli(&broker, &["audit", "verify", "--json"]))).unwrap();
    assert_eq!(verify["status"], "chain_intact_no_checkpoints");
    assert_eq!(rows.len() as i64, verify["chain"]["rows"].as_i64().unwrap());
    for pair in rows.windows(2) {
        assert_eq!(pair[1]["prev_hash"], pair[0]["hash"]);
    }
    assert!(rows.iter().any(|r| r["event"] == "runtime.disabled"));
    let none = stdout_of(&cli(
        &broker,
        &[
            "audit",
            "export",
            "--since",
            "2000-01-01T00:00:00Z",
            "--until",
            "2000-01-02T00:00:00Z",
        ],
    ));
    assert!(none.is_empty());

    // Clear errors: a bad argument, a filter the broker rejects, an unknown id.
    let out = cli(&broker, &["audit", "export", "--since", "whenever"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--since"));
    let out = cli(&broker, &["runs", "list", "--state", "bogus"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid_query"));
    let out = cli(&broker, &["capabilities", "revoke", run_id]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("404"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The admin commands hold the admin token, worth more than any run token:
/// they too ignore proxy variables, follow no redirect and refuse `http://`
/// to a host off this machine before any connection (the test saw the proxy
/// get `runtimes list` with the admin token, and the redirect followed, first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_commands_send_the_admin_token_to_the_broker_only() {
    let broker = start_dev_broker().await;
    let admin = |addr: &str, env: &[(&str, String)]| {
        let mut cmd = Command::new(BIN);
        cmd.args(["runtimes", "list", "--json"])
            .env("TESSERA_ADDR", addr)
            .env("TESSERA_ADMIN_TOKEN_FILE", broker.dir.join("admin.token"))
            .env_remove("NO_PROXY")
            .env_remove("no_proxy");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    };
    let (vars, proxied) = counting_proxy().await;
    let out = admin(&broker.addr, &vars);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        proxied.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the proxy saw the admin token"
    );

    let (redirector, targeted) = redirect_to("/v1/admin/runtimes").await;
    let out = admin(&redirector, &[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("redirect"));
    assert_eq!(
        targeted.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the redirect was followed"
    );

    let out = admin("http://192.0.2.10:8700", &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in clear"), "{err}");
}

/// `runtimes list` says which runtimes are disabled, and `runs show` lists the
/// run's leases as well as its capabilities (issue 15: a disabled runtime read
/// as live; leases were not shown).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_show_states_and_leases() {
    let broker = start_dev_broker().await;
    assert!(cli(
        &broker,
        &[
            "runtimes",
            "create",
            "gone",
            "--users",
            "*",
            "--task-kinds",
            "*"
        ]
    )
    .status
    .success());
    assert!(cli(&broker, &["runtimes", "disable", "gone"])
        .status
        .success());
    let list = stdout_of(&cli(&broker, &["runtimes", "list"]));
    let header = list.lines().next().unwrap_or_default();
    assert!(header.contains("DISABLED_AT"), "{list}");
    let row = list
        .lines()
        .find(|l| l.starts_with("gone "))
        .expect("the runtime's row");
    assert!(
        !row.trim_end().ends_with('-'),
        "disabled_at is shown: {list}"
    );

    let (run_id, token_file) = sandbox_run(&broker).await;
    let out = sandbox_cmd(&broker, &token_file)
        .args([
            "exec",
            "--token",
            "read=svc-reports:reports/2026/q1.csv",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = stdout_of(&cli(&broker, &["runs", "show", &run_id]));
    assert!(shown.contains("LEASE_ID"), "{shown}");
}

/// `runs list` pages: with more runs than `--limit`, it says how to ask for the
/// next page (on stderr, so stdout stays the table), and `--after` asks for it
/// (issue 15: the API returned `next_cursor` but the CLI had no way to use it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_list_pages() {
    let broker = start_dev_broker().await;
    let (first, _) = sandbox_run(&broker).await;
    let (second, _) = sandbox_run(&broker).await;
    let out = cli(&broker, &["runs", "list", "--limit", "1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page1 = stdout_of(&out);
    assert!(
        page1.contains(&first) && !page1.contains(&second),
        "{page1}"
    );
    let hint = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(hint.contains(&format!("--after {first}")), "{hint}");
    let out = cli(
        &broker,
        &["runs", "list", "--limit", "1", "--after", &first],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page2 = stdout_of(&out);
    assert!(
        page2.contains(&second) && !page2.contains(&first),
        "{page2}"
    );
}
