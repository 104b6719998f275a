//! The run token stays with the broker and `exec` (issue 22, items 1–3 and
//! 6–8): client commands send it to the broker only (never through a proxy the
//! environment names, never to a redirect's target, never in clear off this
//! machine); the command `exec` runs cannot find it in any place a process of
//! its user could look; and run as another user (`exec --user`), a hostile
//! command can neither read the token file nor kill, stop or inject into
//! `exec`. A run token is the key to every capability of its run, which is why
//! this family gets its own file.

use crate::support::{
    capabilities_of, counting_proxy, redirect_to, sandbox_cmd, sandbox_run, start_dev_broker, BIN,
};
use std::process::{Command, Stdio};

/// Client commands send the run token only to the broker, never through a
/// proxy the environment names, never to where a redirect points, and never in
/// clear to a host off this machine (issue 22, items 6–8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_send_the_token_to_the_broker_only() {
    let broker = start_dev_broker().await;
    let (_run_id, token_file) = sandbox_run(&broker).await;
    let capability = |cmd: &mut Command| {
        cmd.args([
            "token",
            "capability",
            "--action",
            "read",
            "--resource",
            "svc-reports:reports/2026/q4.csv",
            "--json",
        ])
        .output()
        .unwrap()
    };

    // Proxy variables, as sandboxes often set them: not used for the broker.
    let (vars, proxied) = counting_proxy().await;
    let mut cmd = sandbox_cmd(&broker, &token_file);
    cmd.envs(vars).env_remove("NO_PROXY").env_remove("no_proxy");
    let out = capability(&mut cmd);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        proxied.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the proxy saw a request"
    );

    // A redirect is not followed: the capability request is not re-sent.
    let (redirector, targeted) = redirect_to("/v1/capabilities").await;
    let out = capability(sandbox_cmd(&broker, &token_file).env("TESSERA_ADDR", &redirector));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("redirect"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        targeted.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the redirect was followed"
    );

    // http:// to a host off this machine is refused before any connection
    // (the address is never contacted: the client refuses while it is built).
    let out =
        capability(sandbox_cmd(&broker, &token_file).env("TESSERA_ADDR", "http://192.0.2.10:8700"));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("in clear") && err.contains("TESSERA_INSECURE_HTTP"),
        "{err}"
    );
    // A CA file with an http:// address is a mistake, said as such.
    let out = capability(sandbox_cmd(&broker, &token_file).env("TESSERA_CA_FILE", &token_file));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("TESSERA_CA_FILE"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The command `exec` runs, as an unprivileged user (the test is root, and root
/// may read any process), hunts the run token in every place a process of the
/// same user could look — the parent's `environ`, `cmdline`, `mem` and open
/// descriptors, its own descriptors and environment — in the file, descriptor
/// and environment modes, and finds neither the token nor the token file's
/// path (issue 22, items 1 and 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_keeps_the_run_token_from_the_command() {
    let broker = start_dev_broker().await;
    let (_run_id, token_file) = sandbox_run(&broker).await;
    let token = std::fs::read_to_string(&token_file).unwrap();
    // exec runs as nobody and reads the file in the file mode.
    std::os::unix::fs::chown(&token_file, Some(65534), Some(65534)).unwrap();
    let hunt = r#"p=$PPID
        cat /proc/$p/environ; echo; cat /proc/$p/cmdline; echo
        ls -l /proc/$p/fd/; for f in /proc/$p/fd/*; do head -c 4096 "$f"; done
        head -c 65536 /proc/$p/mem; cat /proc/$p/maps
        env; ls -l /proc/self/fd/
        for f in /proc/self/fd/*; do case "$f" in */0|*/1|*/2) ;; *) head -c 4096 "$f";; esac; done
        echo hunted"#;
    let as_nobody = [
        "setpriv",
        "--reuid=nobody",
        "--regid=nogroup",
        "--clear-groups",
        "--",
    ];
    let modes: [(&str, Vec<(&str, String)>); 3] = [
        (
            "file",
            vec![("TESSERA_RUN_TOKEN_FILE", token_file.display().to_string())],
        ),
        ("descriptor", vec![("TESSERA_RUN_TOKEN_FD", "3".to_owned())]),
        (
            "environment",
            vec![
                ("TESSERA_RUN_TOKEN", token.trim().to_owned()),
                ("TESSERA_ALLOW_TOKEN_ENV", "1".to_owned()),
            ],
        ),
    ];
    for (mode, vars) in modes {
        // sh opens the token file on descriptor 3 for the descriptor mode.
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(r#"exec "$@" 3<"$TOKEN_FILE""#)
            .arg("sh")
            .args(as_nobody)
            .args([BIN, "exec", "--", "sh", "-c", hunt])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap())
            .env("TOKEN_FILE", &token_file)
            .env("TESSERA_ADDR", &broker.addr);
        for (k, v) in &vars {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stdout.contains("hunted"),
            "{mode}: the hunt did not run: {stdout}{stderr}"
        );
        let seen = format!("{stdout}{stderr}");
        assert!(
            !seen.contains(token.trim()),
            "{mode}: the command found the run token:\n{seen}"
        );
        assert!(
            !seen.contains(&token_file.display().to_string()),
            "{mode}: the command found the token file's path:\n{seen}"
        );
    }
}

/// The safe mode for a hostile command: `exec` runs as root and starts the
/// command as another user (`--user nobody`). Told the token file's path, the
/// command still cannot read it (0600, root's), cannot read `exec`'s `/proc`
/// entries, and cannot kill or stop `exec` (another user's process): `exec`
/// outlives it and revokes (issue 22, items 1 and 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_as_root_runs_the_command_as_another_user() {
    let broker = start_dev_broker().await;
    let (run_id, token_file) = sandbox_run(&broker).await;
    let token = std::fs::read_to_string(&token_file).unwrap();
    let hostile = r#"id -u; cat "$0"; cat /proc/$PPID/environ
        kill -9 $PPID && echo killed; kill -STOP $PPID && echo stopped
        echo "home=$HOME user=$USER"; exit 7"#;
    let out = sandbox_cmd(&broker, &token_file)
        .args([
            "exec",
            "--user",
            "nobody",
            "--token",
            "read=svc-reports:reports/2026/q1.csv",
        ])
        .args(["--", "sh", "-c", hostile])
        .arg(&token_file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let seen = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        out.status.code(),
        Some(7),
        "exec outlived the command: {seen}"
    );
    assert!(stdout.starts_with("65534\n"), "{seen}");
    assert!(
        !seen.contains(token.trim()),
        "the command read the token: {seen}"
    );
    assert!(
        !stdout.contains("killed") && !stdout.contains("stopped"),
        "{seen}"
    );
    assert!(stdout.contains("home=/nonexistent user=nobody"), "{seen}");
    let caps = capabilities_of(&broker, &run_id);
    assert!(caps.iter().all(|c| c["state"] == "revoked"), "{caps:?}");

    // A token file that user owns: the command could read it; refused.
    std::os::unix::fs::chown(&token_file, Some(65534), None).unwrap();
    let out = sandbox_cmd(&broker, &token_file)
        .args(["exec", "--user", "nobody", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("belongs to that user"));
    std::os::unix::fs::chown(&token_file, Some(0), None).unwrap();

    // On root's terminal, the command has no controlling terminal: it cannot
    // push input into root's shell (TIOCSTI), nor is it in root's session.
    let inject = broker.dir.join("inject.py");
    std::fs::write(
        &inject,
        "import fcntl, termios\ntry:\n    fcntl.ioctl(0, termios.TIOCSTI, b'x')\n    print('injected')\n\
         except OSError as e:\n    print('refused', e.errno)\n",
    )
    .unwrap();
    for (user, expect) in [("--user nobody", "refused"), ("", "injected")] {
        let line = format!("{BIN} exec {user} -- python3 {}", inject.display());
        let out = Command::new("timeout")
            .args(["20", "script", "-qec", &line, "/dev/null"])
            .env("TESSERA_ADDR", &broker.addr)
            .env("TESSERA_RUN_TOKEN_FILE", &token_file)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(expect), "{user:?}: {text}");
    }

    // Only root may switch users, and never to root.
    for user in ["root", "0", "no-such-user-here"] {
        let out = sandbox_cmd(&broker, &token_file)
            .args(["exec", "--user", user, "--", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(125), "--user {user}");
    }
}
