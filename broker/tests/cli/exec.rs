//! `tessera exec` and `tessera token` as a sandboxed command sees them: the
//! environment is scrubbed to what `--keep-env` allows plus the access token,
//! exit codes and signals pass through, the terminal is handed to the command,
//! warnings reach stderr, a token file others may read is refused, and a
//! capability that needs a human waits for an approval given with the CLI. This
//! is the everyday contract of `exec`; how it keeps the run token from the
//! command is in `token_confinement`, how it revokes in `revocation`.

use crate::support::{
    broker_audit, capabilities_of, cli, sandbox_cmd, sandbox_run, start_dev_broker, stdout_of, BIN,
};
use serde_json::{json, Value};
use std::process::{Command, Stdio};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_scrubs_the_environment_and_revokes_on_exit() {
    let broker = start_dev_broker().await;
    let (run_id, token_file) = sandbox_run(&broker).await;
    let out = sandbox_cmd(&broker, &token_file)
        .args([
            "exec",
            "--token",
            "read=svc-reports:reports/2026/q1.csv",
            "--keep-env",
            "KEEP_ME",
            "--",
            "env",
        ])
        .output()
        .unwrap();
    let env = stdout_of(&out);
    let names: Vec<&str> = env
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .collect();
    assert!(!env.contains("parent-secret-aws"), "{env}");
    assert!(!env.contains("prod-password"), "{env}");
    assert!(
        !names.iter().any(|n| n.starts_with("TESSERA_RUN_TOKEN")),
        "{env}"
    );
    assert!(!env.contains(&std::fs::read_to_string(&token_file).unwrap()));
    assert!(env.contains("KEEP_ME=kept"), "{env}");
    assert!(
        names.contains(&"PATH") && names.contains(&"TESSERA_ACCESS_TOKEN"),
        "{env}"
    );
    // Every capability obtained for the command is revoked once it exited.
    let caps = capabilities_of(&broker, &run_id);
    assert_eq!(caps.len(), 1);
    assert_eq!(caps[0]["state"], "revoked");

    // Exit codes pass through; a denial or a missing command is Tessera's own code.
    let code = |args: &[&str]| {
        sandbox_cmd(&broker, &token_file)
            .args(args)
            .output()
            .unwrap()
            .status
            .code()
    };
    assert_eq!(code(&["exec", "--", "sh", "-c", "exit 7"]), Some(7));
    assert_eq!(code(&["exec", "--", "/nonexistent/tool"]), Some(127));
    let denied = sandbox_cmd(&broker, &token_file)
        .args(["exec", "--token", "read=svc-reports:secret/x", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(denied.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&denied.stderr).contains("capability_denied"));
    assert_eq!(
        code(&["exec", "--keep-env", "TESSERA_RUN_TOKEN_FILE", "--", "true"]),
        Some(125)
    );

    // A child killed outright: its exit is 128+9, and the capability is still revoked.
    let killed = sandbox_cmd(&broker, &token_file)
        .args([
            "exec",
            "--token",
            "read=svc-reports:reports/2026/q2.csv",
            "--",
            "sh",
            "-c",
            "kill -9 $$",
        ])
        .output()
        .unwrap();
    assert_eq!(killed.status.code(), Some(137));
    let caps = capabilities_of(&broker, &run_id);
    assert!(caps.iter().all(|c| c["state"] == "revoked"), "{caps:?}");
    assert_eq!(caps.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_forwards_signals_and_token_capability_prints_a_token() {
    let broker = start_dev_broker().await;
    let (run_id, token_file) = sandbox_run(&broker).await;
    let marker = broker.dir.join("ready");
    let script = format!(
        "trap 'exit 42' TERM; touch {}; while true; do sleep 0.1; done",
        marker.display()
    );
    let mut child = sandbox_cmd(&broker, &token_file)
        .args([
            "exec",
            "--token",
            "read=svc-reports:reports/2026/q3.csv",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .spawn()
        .unwrap();
    for _ in 0..100 {
        if marker.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(marker.exists(), "the command started");
    assert!(Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let status = child.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(42),
        "SIGTERM reached the command's trap"
    );
    assert!(capabilities_of(&broker, &run_id)
        .iter()
        .all(|c| c["state"] == "revoked"));

    let out = sandbox_cmd(&broker, &token_file)
        .args([
            "token",
            "capability",
            "--action",
            "read",
            "--resource",
            "svc-reports:reports/2026/q4.csv",
            "--json",
        ])
        .output()
        .unwrap();
    let v: Value = serde_json::from_str(&stdout_of(&out)).unwrap();
    assert!(v["token"].as_str().unwrap().starts_with("eyJ"));
    let caps = capabilities_of(&broker, &run_id);
    assert!(caps
        .iter()
        .any(|c| c["capability_id"] == v["capability_id"] && c["state"] == "active"));
    // Without a run token file it says what is missing.
    let out = Command::new(BIN)
        .args([
            "token",
            "capability",
            "--action",
            "read",
            "--resource",
            "svc-reports:x",
        ])
        .env("TESSERA_ADDR", &broker.addr)
        .env_remove("TESSERA_RUN_TOKEN_FILE")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("TESSERA_RUN_TOKEN_FILE"));
}

/// On a terminal, the command's own process group is made the foreground
/// group for its life (an interactive tool reads the terminal instead of being
/// stopped by SIGTTIN) and `exec` takes the terminal back after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_hands_the_terminal_to_the_command() {
    let broker = start_dev_broker().await;
    let (_run_id, token_file) = sandbox_run(&broker).await;
    // script(1) runs the line on a new pseudo-terminal, fed from its stdin.
    let line = format!(
        "{BIN} exec --token read=svc-reports:reports/2026/q3.csv -- sh -c 'read x; echo got:$x'; \
         echo back:$(ps -o stat= -p $$)"
    );
    let mut child = Command::new("timeout")
        .args(["20", "script", "-qec", &line, "/dev/null"])
        .env("TESSERA_ADDR", &broker.addr)
        .env("TESSERA_RUN_TOKEN_FILE", &token_file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"typed\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{:?} {text}", out.status);
    assert!(text.contains("got:typed"), "{text}");
    // ps marks a process of the terminal's foreground group with `+`.
    let back = text.split("back:").nth(1).unwrap_or_default();
    assert!(
        back.trim().contains('+'),
        "the shell has its terminal back: {text}"
    );
}

/// What the client library warns about reaches the sandbox command's stderr
/// (there was no subscriber: the warning was dropped), and a token file that
/// others may read is refused with the fix (issue 22, item 8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_commands_warn_on_stderr_and_refuse_a_shared_token_file() {
    let broker = start_dev_broker().await;
    let (_run_id, token_file) = sandbox_run(&broker).await;
    let token = std::fs::read_to_string(&token_file).unwrap();
    let out = Command::new(BIN)
        .args(["exec", "--", "true"])
        .env("TESSERA_ADDR", &broker.addr)
        .env("TESSERA_RUN_TOKEN", token.trim())
        .env("TESSERA_ALLOW_TOKEN_ENV", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("WARN") && stderr.contains("TESSERA_RUN_TOKEN"),
        "{stderr:?}"
    );
    assert!(!stderr.contains(token.trim()));

    std::fs::set_permissions(
        &token_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    for args in [
        &["exec", "--", "true"][..],
        &[
            "token",
            "capability",
            "--action",
            "read",
            "--resource",
            "svc-reports:a",
        ][..],
    ] {
        let out = sandbox_cmd(&broker, &token_file)
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            stderr.contains("mode 644") && stderr.contains("chmod 600"),
            "{stderr}"
        );
    }
}

/// `tessera exec` asks for a capability that needs a human, says so on stderr
/// and waits; `tessera approvals` shows the arguments and an approver key (not
/// the admin token) approves; the command then runs with the access token,
/// whose `args` claim is the hash of the arguments it was approved for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_waits_for_an_approval_that_the_cli_gives() {
    let broker = start_dev_broker().await;
    let rt: Value = serde_json::from_str(&stdout_of(&cli(
        &broker,
        &["runtimes", "create", "deploy-rt", "--json"],
    )))
    .unwrap();
    let run: Value = reqwest::Client::new()
        .post(format!("{}/v1/runs", broker.addr))
        .bearer_auth(rt["key"].as_str().unwrap())
        .json(&json!({ "user": "bob", "task": { "id": "deploy-42", "kind": "deploy" }, "ttl": "30m" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token_file = broker.dir.join("bob.token");
    std::fs::write(&token_file, run["run_token"].as_str().unwrap()).unwrap();
    std::fs::set_permissions(
        &token_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();

    let made: Value = serde_json::from_str(&stdout_of(&cli(
        &broker,
        &[
            "approvers",
            "create",
            "dana-laptop",
            "--user",
            "dana",
            "--json",
        ],
    )))
    .unwrap();
    let key_file = broker.dir.join("dana.key");
    std::fs::write(&key_file, made["key"].as_str().unwrap()).unwrap();
    let listed = stdout_of(&cli(&broker, &["approvers", "list"]));
    assert!(
        listed.contains("dana-laptop") && !listed.contains("tsr_apr_"),
        "{listed}"
    );

    let args = r#"{"service":"web","commit":"4f2a9c1","environment":"staging"}"#;
    let out_file = broker.dir.join("claims.txt");
    let mut exec = sandbox_cmd(&broker, &token_file)
        .args([
            "exec",
            "--token",
            "invoke=deployer:prod/web",
            "--arguments",
            args,
            "--approval-wait",
            "60s",
            "--",
            "sh",
            "-c",
        ])
        .arg(format!(
            "printf %s \"$TESSERA_ACCESS_TOKEN\" > {}",
            out_file.display()
        ))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    let mut id = String::new();
    for _ in 0..100 {
        let v: Value =
            serde_json::from_str(&stdout_of(&cli(&broker, &["approvals", "list", "--json"])))
                .unwrap();
        if let Some(a) = v["approvals"].as_array().and_then(|a| a.first()) {
            id = a["approval_id"].as_str().unwrap().to_owned();
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!id.is_empty(), "exec opened no approval");
    // The admin token can show and deny, never approve.
    let refused = cli(&broker, &["approvals", "approve", &id]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("needs an approver key"));
    let with_key = |args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .env("TESSERA_ADDR", &broker.addr)
            .env("TESSERA_APPROVER_KEY_FILE", &key_file)
            .output()
            .unwrap()
    };
    let shown = stdout_of(&with_key(&["approvals", "show", &id]));
    assert!(
        shown.contains("\"commit\": \"4f2a9c1\"") && shown.contains("user bob"),
        "{shown}"
    );
    let approved = with_key(&["approvals", "approve", &id, "--comment", "matches CHG-42"]);
    assert!(
        approved.status.success(),
        "{}",
        String::from_utf8_lossy(&approved.stderr)
    );

    let status = exec.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(exec.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "approval {id} for invoke on deployer:prod/web is pending"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("is approved"), "{stderr}");
    // The downstream token is bound to exactly these arguments.
    let token = std::fs::read_to_string(&out_file).unwrap();
    let payload = token.split('.').nth(1).unwrap();
    use base64::Engine;
    let claims: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap(),
    )
    .unwrap();
    let want = tessera_client::arguments::hash(&serde_json::from_str(args).unwrap()).unwrap();
    assert_eq!(claims["args"], want.as_str());
    assert_eq!(
        broker_audit(&broker, "approval.approved")[0]["actor"],
        "approver:dana-laptop"
    );
}
