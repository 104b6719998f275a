//! The first day with the real `tessera` binary, as a newcomer, an operator
//! and a deployer meet it: `serve --dev` from any folder, JSON logs, every
//! configuration error at once, `init`, `login`, `status`, the admin token
//! from the environment, exit codes, `--help` examples, completions, https with
//! the system's roots, and output piped into `head`.

#![allow(clippy::unwrap_used)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_tessera");

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A broker process, killed if a test fails before it stops it.
struct Running(Option<Child>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Stops every dev broker started in a folder when dropped.
struct StopIn(PathBuf);

impl Drop for StopIn {
    fn drop(&mut self) {
        stop_brokers_in(&self.0);
    }
}

fn temp_dir(what: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("tessera-{what}-{}", tessera_broker::ids::new_id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `tessera serve --dev` started in `dir` with `args` and `env`, its stderr in
/// `log` (outside `dir`); returns once it answers `/readyz` on `port`.
async fn spawn_dev(
    dir: &Path,
    log: &Path,
    port: u16,
    args: &[&str],
    env: &[(&str, &str)],
) -> Running {
    tessera_broker::server::install_crypto_provider();
    let mut child = Command::new(BIN)
        .args(["serve", "--dev", "--listen", &format!("127.0.0.1:{port}")])
        .args(args)
        .current_dir(dir)
        .env_remove("TESSERA_ADMIN_TOKEN_FILE")
        .env_remove("TESSERA_ADDR")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(log).unwrap()))
        .spawn()
        .unwrap();
    for _ in 0..400 {
        if reqwest::get(format!("http://127.0.0.1:{port}/readyz"))
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return Running(Some(child));
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "the dev broker exited {status}: {}",
                std::fs::read_to_string(log).unwrap()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "the dev broker did not become ready: {}",
        std::fs::read_to_string(log).unwrap()
    );
}

fn sigterm(mut running: Running) {
    let mut child = running.0.take().unwrap();
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    assert!(child.wait().unwrap().success());
}

/// `serve --dev` works from any folder, like `vault server -dev`: with no
/// `policy/` it runs the example policy built into the binary and says so,
/// keeps everything it writes in one folder (`tessera-dev/`, which the
/// repository ignores), writes the admin token there (0600) and prints the lines
/// that point the CLI at it; a restart keeps the token (issue 15: outside the
/// checkout it failed with "cannot list policy directory" and left a stray KEK;
/// the token was printed, never written, unless a variable named a file).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_mode_works_from_any_folder_and_says_what_to_export() {
    let dir = std::env::temp_dir().join(format!(
        "tessera-anywhere-{}",
        tessera_broker::ids::new_id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.with_extension("log");
    let port = free_port();
    let child = spawn_dev(&dir, &log, port, &[], &[]).await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("example policy"), "{text}");
    let export = |name: &str| -> String {
        let prefix = format!("export {name}=");
        text.lines()
            .find_map(|l| l.trim().strip_prefix(&prefix).map(str::to_owned))
            .unwrap_or_else(|| panic!("no `{prefix}` line in: {text}"))
    };
    assert_eq!(export("TESSERA_ADDR"), format!("http://127.0.0.1:{port}"));
    let token_file = PathBuf::from(export("TESSERA_ADMIN_TOKEN_FILE"));
    assert_eq!(token_file, dir.join("tessera-dev/admin.token"));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let entries: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(entries, ["tessera-dev"], "one folder, nothing else");
    // The exported lines are all the CLI needs.
    let out = Command::new(BIN)
        .args(["runtimes", "list"])
        .env("TESSERA_ADDR", export("TESSERA_ADDR"))
        .env("TESSERA_ADMIN_TOKEN_FILE", &token_file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = std::fs::read_to_string(&token_file).unwrap();
    sigterm(child);
    let child = spawn_dev(&dir, &log, port, &[], &[]).await;
    assert_eq!(
        std::fs::read_to_string(&token_file).unwrap(),
        token,
        "a restart keeps the token"
    );
    sigterm(child);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&log);
}

/// With `TESSERA_LOG_FORMAT=json` every line the broker writes is JSON, from
/// the first to the last, the dev banner and a failed start included; the
/// start is one line that says where it listens, the store, the policy set and
/// the backends (issue 15: the startup lines were plain text in JSON mode).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_json_from_the_first_line_and_say_what_started() {
    let dir = std::env::temp_dir().join(format!("tessera-json-{}", tessera_broker::ids::new_id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.with_extension("log");
    let port = free_port();
    let child = spawn_dev(&dir, &log, port, &[], &[("TESSERA_LOG_FORMAT", "json")]).await;
    sigterm(child);
    let text = std::fs::read_to_string(&log).unwrap();
    let events: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let start = events
        .iter()
        .find(|e| e["fields"]["message"] == "tessera listening")
        .unwrap_or_else(|| panic!("no start line: {text}"));
    let f = &start["fields"];
    assert_eq!(f["addr"], format!("127.0.0.1:{port}"), "{f}");
    assert!(f["store"].as_str().unwrap().contains("tessera.db"), "{f}");
    assert!(f["policies"].as_u64().unwrap() > 0, "{f}");
    assert_eq!(f["backends"], "deployer(token),svc-reports(token)", "{f}");
    assert!(
        events.iter().any(|e| e["fields"]["exports"]
            .as_str()
            .is_some_and(|x| x.contains("TESSERA_ADDR"))),
        "the dev banner is an event: {text}"
    );
    // A start that fails says why, as JSON too.
    std::fs::write(dir.join("bad.toml"), "listen = \"nowhere\"\n").unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--dev", "--config", "bad.toml"])
        .current_dir(&dir)
        .env("TESSERA_LOG_FORMAT", "json")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for line in err.lines() {
        let e: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(
            e["fields"]["error"]
                .as_str()
                .unwrap()
                .contains("bad.toml:1:10: listen"),
            "{line}"
        );
    }
    assert!(!err.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&log);
}

/// Every configuration problem is reported by one start, each at its
/// FILE:LINE:COL, the store and the key included (issue 15: they came one per
/// restart: the store, then the KEK, then the AWS credentials).
#[test]
fn serve_reports_every_configuration_error_at_once() {
    let dir = std::env::temp_dir().join(format!("tessera-cfg-{}", tessera_broker::ids::new_id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("tessera.toml"),
        "[limits]\nmax_uses = 0\n\n[backends.aws-main]\nkind = \"aws-sts\"\nregion = \"eu-west-1\"\n\
         role_arn = \"arn:aws:iam::123456789012:role/x\"\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--config", "tessera.toml"])
        .current_dir(&dir)
        .env_clear()
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for needle in [
        "4 configuration errors",
        "config error: store:",
        "config error: keys.kek_file:",
        "config error: tessera.toml:2:12: limits.max_uses:",
        "config error: tessera.toml:4:1: backends.aws-main:",
    ] {
        assert!(err.contains(needle), "{needle:?} missing from: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A dev broker in a fresh folder: `(child, dir, addr, admin token file)`.
async fn dev_broker(what: &str) -> (Running, PathBuf, String, PathBuf) {
    let dir = temp_dir(what);
    let port = free_port();
    let log = dir.join("broker.log");
    let policy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policy");
    let child = spawn_dev(
        &dir,
        &log,
        port,
        &[
            "--data-dir",
            dir.join("data").to_str().unwrap(),
            "--policy-dir",
            policy.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    let token = dir.join("data/admin.token");
    (child, dir, format!("http://127.0.0.1:{port}"), token)
}

/// The binary with `args`, nothing of this process's environment but `PATH`,
/// plus `env`.
fn tessera(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// `attempt` until it succeeds (a broker still starting), at most 10 s; on
/// giving up, panics with the last attempt's stderr and the broker's log.
async fn until_ok(attempt: impl Fn() -> std::process::Output, log: &Path) -> std::process::Output {
    for _ in 0..200 {
        let out = attempt();
        if out.status.success() {
            return out;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "{}\n{}",
        stderr(&attempt()),
        std::fs::read_to_string(log).unwrap_or_default()
    )
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Every command's `--help` ends with examples and every positional argument
/// says what it is (issue 15: no `--help` had an example; `runs show ID` and
/// the others had empty help).
#[test]
fn every_help_has_examples_and_every_positional_says_what_it_is() {
    use clap::CommandFactory;
    fn walk(cmd: &clap::Command, path: &mut Vec<String>, all: &mut Vec<Vec<String>>) {
        all.push(path.clone());
        for sub in cmd.get_subcommands() {
            path.push(sub.get_name().to_owned());
            walk(sub, path, all);
            path.pop();
        }
        for arg in cmd.get_positionals() {
            let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
            assert!(
                !help.trim().is_empty(),
                "`tessera {}` <{}> has no help",
                path.join(" "),
                arg.get_id()
            );
        }
    }
    let mut all = Vec::new();
    walk(
        &tessera_broker::cli::Cli::command(),
        &mut Vec::new(),
        &mut all,
    );
    assert!(all.len() > 30, "{}", all.len());
    for path in all {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let out = tessera(&args, &[]);
        assert!(
            out.status.success(),
            "tessera {}: {}",
            args.join(" "),
            stderr(&out)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("Examples:\n  tessera")
                || text.contains("Examples:\n  credential_process"),
            "`tessera {}` has no examples:\n{text}",
            args.join(" ")
        );
    }
}

/// Exit status: 0 done; 2 the broker refused; 1 anything on this side
/// (issue 15: every error exited 1, so a script could not tell a typo or a
/// broker that is down from a refusal).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_split_this_side_from_the_brokers_refusal() {
    let (child, dir, addr, token) = dev_broker("exit").await;
    let token = token.to_str().unwrap();
    let ok = tessera(
        &["runtimes", "list", "--addr", &addr, "--token-file", token],
        &[],
    );
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
    let code = |args: &[&str], env: &[(&str, &str)]| {
        let out = tessera(args, env);
        (out.status.code(), stderr(&out))
    };
    // The broker refused: 2.
    let missing = "0b9c6f7e-2a1d-4c3b-9f8e-1d2c3b4a5f60";
    let (c, e) = code(
        &[
            "runs",
            "show",
            missing,
            "--addr",
            &addr,
            "--token-file",
            token,
        ],
        &[],
    );
    assert_eq!(c, Some(2), "{e}");
    assert!(e.contains("not_found"), "{e}");
    let wrong = dir.join("wrong.token");
    std::fs::write(
        &wrong,
        "tsr_adm_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n",
    )
    .unwrap();
    let (c, e) = code(
        &[
            "runtimes",
            "list",
            "--addr",
            &addr,
            "--token-file",
            wrong.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(c, Some(2), "{e}");
    // This side: 1.
    let closed = format!("http://127.0.0.1:{}", free_port());
    for (args, env, says) in [
        (
            vec![
                "runtimes",
                "list",
                "--addr",
                closed.as_str(),
                "--token-file",
                token,
            ],
            vec![],
            "cannot reach",
        ),
        (
            vec!["runtimes", "list", "--addr", addr.as_str()],
            vec![("HOME", "/nonexistent")],
            "no admin token",
        ),
        (
            vec![
                "runtimes",
                "list",
                "--addr",
                addr.as_str(),
                "--token-file",
                "/nonexistent",
            ],
            vec![],
            "cannot read",
        ),
        (vec!["runtimes", "lisst"], vec![], "unrecognized subcommand"),
        (
            vec!["runs", "list", "--limit", "many"],
            vec![],
            "invalid value",
        ),
    ] {
        let (c, e) = code(&args, &env);
        assert_eq!(c, Some(1), "{args:?}: {e}");
        assert!(e.contains(says), "{args:?}: {e}");
    }
    sigterm(child);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The admin token may come from `TESSERA_ADMIN_TOKEN` or from `tessera
/// login`, which checks it with the broker before saving it 0600 (issue 15:
/// the CLI read only a token file).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_token_comes_from_the_environment_or_login() {
    let (child, dir, addr, token_file) = dev_broker("login").await;
    let token = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_owned();
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let home = home.to_str().unwrap();
    let list = |env: &[(&str, &str)]| tessera(&["runtimes", "list", "--addr", &addr], env);
    let out = list(&[("HOME", home), ("TESSERA_ADMIN_TOKEN", &token)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        list(&[("HOME", home)]).status.code(),
        Some(1),
        "no token yet"
    );
    // A token the broker refuses is not saved.
    let login = |input: &str| {
        let mut child = Command::new(BIN)
            .args(["login", "--addr", &addr])
            .env_clear()
            .env("HOME", home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let out = login("tsr_adm_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let saved = Path::new(home).join(".config/tessera/admin.token");
    assert!(!saved.exists());
    let out = login("not a token\n");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let out = login(&format!("{token}\n"));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains(&token),
        "the token is never printed"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&saved).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::metadata(saved.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o700
    );
    let out = list(&[("HOME", home)]);
    assert!(
        out.status.success(),
        "the saved token is used: {}",
        stderr(&out)
    );
    sigterm(child);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tessera init` makes the KEK and the admin token a production broker needs
/// (0600, never overwritten), and a production broker starts on them; `tessera
/// status` then says it is ready and accepts the token (issue 15: no command
/// generated either).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_makes_what_production_needs_and_status_says_it_works() {
    let dir = temp_dir("init");
    let secrets = dir.join("secrets");
    let out = tessera(&["init", "--dir", secrets.to_str().unwrap(), "--json"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let paths: Value = serde_json::from_slice(&out.stdout).unwrap();
    let kek = PathBuf::from(paths["kek_file"].as_str().unwrap());
    let token_file = PathBuf::from(paths["admin_token_file"].as_str().unwrap());
    use std::os::unix::fs::PermissionsExt;
    for f in [&kek, &token_file] {
        assert_eq!(
            std::fs::metadata(f).unwrap().permissions().mode() & 0o777,
            0o600,
            "{f:?}"
        );
    }
    let before = (
        std::fs::read(&kek).unwrap(),
        std::fs::read(&token_file).unwrap(),
    );
    let again = tessera(&["init", "--dir", secrets.to_str().unwrap()], &[]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).contains("never overwrites"),
        "{}",
        stderr(&again)
    );
    assert_eq!(
        before,
        (
            std::fs::read(&kek).unwrap(),
            std::fs::read(&token_file).unwrap()
        )
    );

    let port = free_port();
    let policy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policy");
    let _broker = Running(Some(
        Command::new(BIN)
            .args([
                "serve",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--policy-dir",
            ])
            .arg(&policy)
            .env_clear()
            .env(
                "TESSERA_STORE_URL",
                format!("sqlite://{}", dir.join("tessera.db").display()),
            )
            .env("TESSERA_KEK_FILE", &kek)
            .env("TESSERA_ADMIN_TOKEN_FILE", &token_file)
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(dir.join("broker.log")).unwrap(),
            ))
            .spawn()
            .unwrap(),
    ));
    let addr = format!("http://127.0.0.1:{port}");
    let out = until_ok(
        || {
            tessera(
                &[
                    "status",
                    "--addr",
                    &addr,
                    "--token-file",
                    token_file.to_str().unwrap(),
                    "--json",
                ],
                &[],
            )
        },
        &dir.join("broker.log"),
    )
    .await;
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["ready"], true, "{status}");
    assert_eq!(status["addr"], addr, "{status}");
    assert_eq!(status["admin_token"], "accepted", "{status}");
    assert!(status["active_kid"].is_string(), "{status}");
    // One replica, enforcing the version its start published.
    assert_eq!(status["store"], "sqlite", "{status}");
    assert_eq!(status["published_policy"]["version"], 1, "{status}");
    assert_eq!(status["replicas"].as_array().unwrap().len(), 1, "{status}");
    assert_eq!(status["replicas"][0]["this"], true, "{status}");
    assert_eq!(status["replicas"][0]["policy_version"], 1, "{status}");
    assert_eq!(
        status["replicas"][0]["signing_kid"], status["active_kid"],
        "{status}"
    );
    // Given as host:port, said as the URL it reached.
    let human = tessera(
        &[
            "status",
            "--addr",
            &format!("127.0.0.1:{port}"),
            "--token-file",
            token_file.to_str().unwrap(),
        ],
        &[],
    );
    let human = String::from_utf8_lossy(&human.stdout).into_owned();
    assert!(human.contains("admin token: accepted"), "{human}");
    assert!(human.contains("policy:      version 1 "), "{human}");
    assert!(human.contains("replicas:    1"), "{human}");
    assert!(
        human.contains(&format!("broker:      {addr} (ready)")),
        "{human}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tessera completions SHELL` prints a script that shell loads (issue 15:
/// there was none).
#[test]
fn completions_for_bash_zsh_and_fish() {
    for (shell, marker) in [
        ("bash", "_tessera()"),
        ("zsh", "#compdef tessera"),
        ("fish", "complete -c tessera"),
    ] {
        let out = tessera(&["completions", shell], &[]);
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(
            script.contains(marker) && script.contains("runtimes"),
            "{shell}: {script:.200}"
        );
    }
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source <({BIN} completions bash) && complete -p tessera"
        ))
        .output()
        .unwrap();
    assert!(out.status.success(), "bash loads it: {}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("_tessera"));
}

/// Output piped into a reader that stops early ends quietly (issue 15:
/// `audit export | head` printed "Broken pipe").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_piped_into_head_ends_quietly() {
    let (child, dir, addr, token_file) = dev_broker("pipe").await;
    let token = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_owned();
    // Enough rows that the export outlives the pipe's buffer.
    let http = reqwest::Client::new();
    for i in 0..400 {
        let r = http
            .post(format!("{addr}/v1/admin/runtimes"))
            .bearer_auth(&token)
            .json(&serde_json::json!({ "name": format!("rt-{i}") }))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.status());
    }
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "{BIN} audit export --since 1h | head -n 1; echo \"status=${{PIPESTATUS[0]}}\""
        ))
        .env("TESSERA_ADDR", &addr)
        .env("TESSERA_ADMIN_TOKEN_FILE", &token_file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    assert!(
        stdout.ends_with("status=141\n"),
        "ended as SIGPIPE would: {stdout}"
    );
    assert_eq!(stderr(&out), "", "nothing said about the pipe");
    sigterm(child);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An `https://` broker is verified against the system's roots when no CA
/// is named (here the roots are the file `SSL_CERT_FILE` names, as for
/// OpenSSL), and a certificate those roots did not sign is refused (issue 15:
/// `https://` required `TESSERA_CA_FILE` even for a public CA).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_uses_the_system_roots_by_default() {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca = |name: &str| {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(rcgen::DnType::CommonName, name);
        (p.self_signed(&key).unwrap(), key)
    };
    let (ca_cert, ca_key) = ca("tessera test root");
    let (other_ca, _) = ca("someone else");
    let server_key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .signed_by(&server_key, &ca_cert, &ca_key)
        .unwrap();
    let dir = temp_dir("https");
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let cert = write("server.pem", &server.pem());
    let key = write("server.key", &server_key.serialize_pem());
    let roots = write("roots.pem", &ca_cert.pem());
    let others = write("others.pem", &other_ca.pem());
    let config = write(
        "tessera.toml",
        &format!(
            "[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n[http]\nallowed_hosts = [\"localhost\"]\n",
            cert.display(),
            key.display()
        ),
    );
    let port = free_port();
    let policy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policy");
    let _broker = Running(Some(
        Command::new(BIN)
            .args([
                "serve",
                "--dev",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--config",
            ])
            .arg(&config)
            .arg("--data-dir")
            .arg(dir.join("data"))
            .arg("--policy-dir")
            .arg(&policy)
            .env_remove("TESSERA_ADMIN_TOKEN_FILE")
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(dir.join("broker.log")).unwrap(),
            ))
            .spawn()
            .unwrap(),
    ));
    let addr = format!("https://localhost:{port}");
    let token = dir.join("data/admin.token");
    let status = |roots: &Path| {
        tessera(
            &[
                "status",
                "--addr",
                &addr,
                "--token-file",
                token.to_str().unwrap(),
            ],
            &[("SSL_CERT_FILE", roots.to_str().unwrap())],
        )
    };
    let ok = until_ok(|| status(&roots), &dir.join("broker.log")).await;
    assert!(String::from_utf8_lossy(&ok.stdout).contains("(ready)"));
    let refused = status(&others);
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(
        stderr(&refused).to_lowercase().contains("certificate"),
        "{}",
        stderr(&refused)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The README's "Five minutes with curl" block, as written but for its port,
/// runs with the binary command 1 built, whether or not a dev broker is
/// already running, and leaves nothing that git would add (issue 15: step 1
/// failed with "address already in use" when command 1 was still running,
/// `cargo run` sat behind a build lock, and the token and KEK files were
/// left untracked in the checkout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_walkthrough_runs_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let section = &readme[readme
        .find("## Five minutes with curl")
        .expect("the walk-through")..];
    let start = section.find("```sh\n").unwrap() + "```sh\n".len();
    let block = &section[start..start + section[start..].find("```").unwrap()];
    let port = free_port();
    let script = block.replace("8700", &port.to_string());
    // A checkout: the policy folder and the .gitignore, committed.
    let dir = temp_dir("readme");
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let stop = StopIn(dir.clone());
    git(&["init", "-q"]);
    std::fs::copy(root.join(".gitignore"), dir.join(".gitignore")).unwrap();
    copy_tree(&root.join("policy"), &dir.join("policy"));
    git(&["add", "-A"]);
    git(&[
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-qm",
        "checkout",
    ]);
    // The README's PATH line finds the binary through CARGO_TARGET_DIR.
    let target = Path::new(BIN).parent().unwrap().parent().unwrap();
    let run = |what: &str| {
        // Files, not pipes: a broker the block leaves running must not keep
        // this test waiting for the end of its output.
        let (out_file, err_file) = (dir.with_extension("out"), dir.with_extension("err"));
        let status = Command::new("timeout")
            .args(["120", "bash", "-c"])
            .arg(format!("set -euo pipefail\n{script}"))
            .current_dir(&dir)
            .env("CARGO_TARGET_DIR", target)
            // The port the text was given instead of 8700.
            .env("TESSERA_LISTEN", format!("127.0.0.1:{port}"))
            .env_remove("TESSERA_ADDR")
            .env_remove("TESSERA_ADMIN_TOKEN_FILE")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out_file).unwrap())
            .stderr(std::fs::File::create(&err_file).unwrap())
            .status()
            .unwrap();
        let stdout = std::fs::read_to_string(&out_file).unwrap();
        let err = std::fs::read_to_string(&err_file).unwrap();
        assert!(status.success(), "{what}: {status}\n{stdout}\n{err}");
        assert!(
            stdout.replace(' ', "").contains("\"active\":false"),
            "{what}: the capability died with the run: {stdout}"
        );
        assert!(stdout.contains("capability_denied"), "{what}: {stdout}");
        stdout
    };
    // Nothing running: step 1 starts the broker (in the background, as written).
    run("no broker running");
    // It is still running: the block uses it.
    run("a broker already running");
    assert_eq!(
        git(&["status", "--porcelain"]),
        "",
        "nothing for git to add"
    );
    // The broker step 1 started.
    drop(stop);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(dir.with_extension("out"));
    let _ = std::fs::remove_file(dir.with_extension("err"));
}

/// SIGTERM to every `tessera serve` whose working folder is `dir`.
fn stop_brokers_in(dir: &Path) {
    let Ok(dir) = std::fs::canonicalize(dir) else {
        return;
    };
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cwd = std::fs::read_link(entry.path().join("cwd")).ok();
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let dev_broker = cmdline.windows(12).any(|w| w == b"serve\0--dev\0");
        if cwd.as_deref() == Some(dir.as_path()) && dev_broker {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            copy_tree(&path, &to.join(entry.file_name()));
        } else {
            std::fs::copy(&path, to.join(entry.file_name())).unwrap();
        }
    }
}

/// A dev broker trusts only a data folder it owns that no one else may write
/// to, and only its own KEK and token files there (a review's finding: in a
/// shared folder such as /tmp, another user could leave a token they know).
#[test]
fn dev_mode_refuses_a_data_folder_or_secret_others_could_have_written() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_dir("shared");
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o777)).unwrap();
    let serve = || {
        Command::new(BIN)
            .args(["serve", "--dev", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(&data)
            .current_dir(&dir)
            .env_remove("TESSERA_ADMIN_TOKEN_FILE")
            .output()
            .unwrap()
    };
    let out = serve();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no one else may write to"),
        "{}",
        stderr(&out)
    );
    assert!(!data.join("admin.token").exists());
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(
        data.join("admin.token"),
        "tsr_adm_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n",
    )
    .unwrap();
    std::fs::set_permissions(
        data.join("admin.token"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let out = serve();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("development admin token"),
        "{}",
        stderr(&out)
    );
    // The saved login token is refused the same way.
    let home = dir.join("home");
    let saved = home.join(".config/tessera/admin.token");
    std::fs::create_dir_all(saved.parent().unwrap()).unwrap();
    std::fs::write(
        &saved,
        "tsr_adm_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n",
    )
    .unwrap();
    std::fs::set_permissions(&saved, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = tessera(&["runtimes", "list"], &[("HOME", home.to_str().unwrap())]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("must be yours with mode 600"),
        "{}",
        stderr(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
