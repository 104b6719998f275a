//! End-to-end tests of the administrator's policy tools, running the real `tessera`
//! binary: `policy check` (warnings), `policy test` (cases) and `policy explain`.

#![allow(clippy::unwrap_used)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_tessera");

fn shipped() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../policy")
}

/// A scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Scratch {
    fn new() -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "tessera-policy-cli-{}",
            tessera_broker::ids::new_id()
        ));
        std::fs::create_dir_all(dir.join("policy/tests")).unwrap();
        Scratch(dir)
    }

    fn policy(&self) -> PathBuf {
        self.0.join("policy")
    }

    /// The shipped schema and entities, with these policy files and no case file.
    fn with_policies(files: &[(&str, &str)]) -> Scratch {
        let s = Scratch::new();
        for f in ["schema.cedarschema", "entities.json"] {
            std::fs::copy(shipped().join(f), s.policy().join(f)).unwrap();
        }
        for (name, text) in files {
            s.write(name, text);
        }
        s
    }

    /// A copy of the shipped policy directory, cases included.
    fn shipped_copy() -> Scratch {
        let s = Scratch::new();
        for sub in ["", "tests"] {
            for entry in std::fs::read_dir(shipped().join(sub)).unwrap() {
                let path = entry.unwrap().path();
                if path.is_file() {
                    let to = s.policy().join(sub).join(path.file_name().unwrap());
                    std::fs::copy(&path, to).unwrap();
                }
            }
        }
        s
    }

    /// Writes `text` to `name`, relative to the policy directory.
    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.policy().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

fn tessera(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

fn show(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    )
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn the_shipped_cases_pass() {
    let out = tessera(&["policy", "test", path(&shipped())]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let stdout = text(&out.stdout);
    assert!(!stdout.contains("FAIL"), "{stdout}");
    assert!(stdout.contains(" 0 failed"), "{stdout}");
    assert!(
        stdout.contains("overlap: analyst on public reports gets the strictest of both"),
        "{stdout}"
    );
}

#[test]
fn a_failing_case_exits_1_and_shows_the_difference() {
    let s = Scratch::shipped_copy();
    s.write(
        "tests/wrong.toml",
        r#"[backends]
svc-reports = "token"

[[case]]
name = "carol reads reports (wrongly expected)"
user = "carol"
action = "read"
resource = "svc-reports:reports/q1"
task_kind = "summarize"
expect = "allow"

[[case]]
name = "analysts get 30m (wrongly expected)"
user = "alice"
action = "read"
resource = "svc-reports:reports/q1"
task_kind = "summarize"
expect = "allow"
ttl = "30m"
"#,
    );
    let out = tessera(&["policy", "test", path(&s.policy())]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stdout = text(&out.stdout);
    let row = |name: &str| {
        stdout
            .lines()
            .find(|l| l.contains(name))
            .unwrap_or_default()
            .to_string()
    };
    let carol = row("carol reads reports");
    assert!(
        carol.contains("FAIL: decision: expected allow, got deny (no permit matched)"),
        "{stdout}"
    );
    let ttl = row("analysts get 30m");
    assert!(
        ttl.contains("FAIL: ttl: expected 30m, got 15m (@ttl of analysts-read-reports)"),
        "{stdout}"
    );
    assert!(stdout.contains(" 2 failed"), "{stdout}");
}

/// `policy test --json` and `--junit FILE`, and `policy check --json`, for
/// CI (issue 15: neither had machine-readable output).
#[test]
fn policy_results_as_json_and_junit() {
    let s = Scratch::shipped_copy();
    s.write(
        "tests/wrong.toml",
        "[backends]\nsvc-reports = \"token\"\n\n[[case]]\nname = \"carol <reads>\"\nuser = \"carol\"\n\
         action = \"read\"\nresource = \"svc-reports:reports/q1\"\ntask_kind = \"summarize\"\nexpect = \"allow\"\n",
    );
    let junit = s.0.join("report.xml");
    let out = tessera(&[
        "policy",
        "test",
        path(&s.policy()),
        "--json",
        "--junit",
        path(&junit),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let v: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", show(&out)));
    assert_eq!(v["failed"], 1, "{v}");
    assert!(v["total"].as_u64().unwrap() > 10, "{v}");
    let wrong = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"].as_str().unwrap().ends_with("wrong.toml"))
        .unwrap();
    assert_eq!(wrong["cases"][0]["passed"], false);
    assert_eq!(wrong["cases"][0]["got"], "deny");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.starts_with("<?xml"), "{xml}");
    assert_eq!(
        xml.matches("<testcase ").count() as u64,
        v["total"].as_u64().unwrap()
    );
    assert_eq!(xml.matches("<failure ").count(), 1);
    assert!(xml.contains("name=\"carol &lt;reads&gt;\""), "{xml}");

    let out = tessera(&["policy", "check", path(&s.policy()), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["valid"], true);
    assert!(v["policies"].as_u64().unwrap() > 0);
    s.write(
        "broken.cedar",
        "permit (principal, action, resource)\nwhen { resource.nosuch == 1 };\n",
    );
    let out = tessera(&["policy", "check", path(&s.policy()), "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["valid"], false);
    let e = &v["errors"][0];
    assert!(e["file"].as_str().unwrap().ends_with("broken.cedar"), "{v}");
    assert!(e["line"].as_u64().unwrap() >= 1, "{v}");
}

#[test]
fn a_malformed_case_file_is_a_clear_error_and_nothing_runs() {
    let s = Scratch::shipped_copy();
    s.write(
        "tests/bad.toml",
        "[backends]\nsvc-reports = \"token\"\n\n[[case]]\nname = \"typo\"\nuser = \"alice\"\n\
         action = \"read\"\nresource = \"svc-reports:reports/q1\"\ntask_kind = \"summarize\"\n\
         expect = \"allow\"\ntll = \"15m\"\n",
    );
    let out = tessera(&["policy", "test", path(&s.policy())]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("bad.toml:11: error: case \"typo\": unknown field `tll`"),
        "{stderr}"
    );
    assert!(stderr.contains("no case was run"), "{stderr}");
    assert!(!text(&out.stdout).contains("PASS"), "{}", show(&out));

    // A request the broker would refuse before policy is also malformed.
    s.write(
        "tests/bad.toml",
        "[[case]]\nname = \"pg\"\nuser = \"alice\"\naction = \"select\"\n\
         resource = \"pg-main:analytics.public.orders\"\ntask_kind = \"summarize\"\n\
         expect = \"allow\"\n",
    );
    let out = tessera(&["policy", "test", path(&s.policy())]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("case \"pg\": resource \"pg-main:analytics.public.orders\": backend pg-main is unknown (unknown_backend)"),
        "{}",
        show(&out)
    );
}

#[test]
fn explain_prints_the_deciding_policies_and_constraints() {
    let dir = shipped();
    let base = [
        "policy",
        "explain",
        "--dir",
        path(&dir),
        "--user",
        "alice",
        "--action",
        "read",
        "--resource",
        "svc-reports:reports/public/a.csv",
        "--task-kind",
        "summarize",
    ];
    let out = tessera(&base);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("decision: allow"), "{stdout}");
    // Piped into a reader that stops early (`| head`): a quiet end, no panic.
    let mut child = Command::new(BIN)
        .args(base)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let closed = child.wait_with_output().unwrap();
    let err = text(&closed.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(closed.status.code(), Some(141), "{err}");
    assert!(
        stdout.contains("satisfied permits: analysts-read-reports, staff-read-public-reports"),
        "{stdout}"
    );
    assert!(
        stdout.contains("@rate of staff-read-public-reports"),
        "{stdout}"
    );

    let mut tainted = base.to_vec();
    tainted.extend(["--label", "untrusted-input", "--json"]);
    let out = tessera(&tainted);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["decision"], "deny");
    assert_eq!(j["reason"], "forbidden");
    assert_eq!(j["policies"], serde_json::json!(["guard-untrusted-input"]));

    // A server cap from --config bounds the policy's @ttl, and explain says so.
    let s = Scratch::new();
    let config = s.0.join("tessera.toml");
    std::fs::write(
        &config,
        "[limits]\nmax_capability_ttl = \"10m\"\n\
         [backends.svc-reports]\nkind = \"token\"\naudience = \"https://reports\"\n",
    )
    .unwrap();
    let mut capped = base.to_vec();
    capped.extend(["--config", path(&config)]);
    let out = tessera(&capped);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("bounded by the server cap limits.max_capability_ttl = 10m (analysts-read-reports asks for 15m)"),
        "{}",
        show(&out)
    );

    // What the broker would refuse before policy is refused here, not explained.
    let mut bad = base.to_vec();
    bad[9] = "svc-reports:../etc/passwd";
    let out = tessera(&bad);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("invalid_resource"),
        "{}",
        show(&out)
    );
}

/// Database kinds and wildcard sets, offline: no URL, no server, the broker's rule.
#[test]
fn explain_decides_database_kinds_and_sets_offline() {
    let dir = shipped();
    let explain = |resource: &str, action: &str, kind: &str| {
        let out = tessera(&[
            "policy",
            "explain",
            "--dir",
            path(&dir),
            "--user",
            "alice",
            "--action",
            action,
            "--resource",
            resource,
            "--task-kind",
            "summarize",
            "--backend-kind",
            kind,
            "--json",
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", show(&out));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let j = explain("pg-main:analytics.public.orders", "select", "postgres");
    assert_eq!(j["decision"], "allow", "{j}");
    assert_eq!(j["request"]["backend_kind"], "postgres");
    assert_eq!(j["constraints"]["uses"]["value"], 3);
    let j = explain("pg-main:analytics.public.*", "select", "postgres");
    assert_eq!(j["reason"], "wildcard_not_covered", "{j}");
    let j = explain("pg-main:reporting.public.*", "select", "postgres");
    assert_eq!(j["decision"], "allow", "{j}");
    let j = explain("svc-reports:reports/*", "read", "token");
    assert_eq!(j["decision"], "allow", "{j}");
    assert_eq!(
        j["constraints"]["rate"]["policy"],
        "staff-read-public-reports"
    );
    // MariaDB folds names: one spelling, refused before policy.
    let out = tessera(&[
        "policy",
        "explain",
        "--dir",
        path(&dir),
        "--user",
        "bob",
        "--action",
        "insert",
        "--resource",
        "my-shop:shop.ORDERS",
        "--task-kind",
        "deploy",
        "--backend-kind",
        "mysql",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("invalid_resource"),
        "{}",
        show(&out)
    );
}

#[test]
fn check_warns_on_a_permit_without_ttl_and_on_a_cap_overrun() {
    let s = Scratch::with_policies(&[(
        "a.cedar",
        "@id(\"no-ttl\")\npermit (principal, action == Tessera::Action::\"read\", resource);\n\n\
         @id(\"many\") @ttl(\"5m\")\n@uses(\"20\")\npermit (principal, action == Tessera::Action::\"write\", resource);\n",
    )]);
    let out = tessera(&["policy", "check", path(&s.policy())]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("a.cedar:1:1: warning: permit \"no-ttl\" has no @ttl"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("@uses"),
        "20 is within the default cap: {stderr}"
    );
    assert!(text(&out.stdout).contains("1 warning"), "{}", show(&out));

    let config = s.0.join("tessera.toml");
    std::fs::write(&config, "[limits]\nmax_uses = 5\ndefault_uses = 5\n").unwrap();
    let out = tessera(&[
        "policy",
        "check",
        path(&s.policy()),
        "--config",
        path(&config),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(
        text(&out.stderr).contains(
            "a.cedar:5:1: warning: @uses(\"20\") of \"many\" is above the server cap limits.max_uses = 5; the cap will bound it to 5"
        ),
        "{}",
        show(&out)
    );

    let out = tessera(&["policy", "check", path(&s.policy()), "--deny-warnings"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let out = tessera(&["policy", "check", path(&shipped()), "--deny-warnings"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));

    // A configuration that cannot be read is not a clean bill of health.
    let out = tessera(&[
        "policy",
        "check",
        path(&s.policy()),
        "--config",
        "/nonexistent.toml",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
}

#[test]
fn backends_check_names_unsafe_defaults_with_their_fix() {
    let dir = std::env::temp_dir().join(format!("tessera-bcheck-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("tessera.toml");
    std::fs::write(
        &config,
        "[backends.pg-main]\nkind = \"postgres\"\nurl_env = \"TESSERA_TEST_CHECK_PG\"\n\n\
         [backends.svc]\nkind = \"token\"\naudience = \"https://svc.internal\"\n",
    )
    .unwrap();
    let pg = std::env::var("TESSERA_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let run = |name: &str| {
        Command::new(BIN)
            .args(["backends", "check", name, "--config", path(&config)])
            .env("TESSERA_TEST_CHECK_PG", &pg)
            .output()
            .unwrap()
    };
    let out = run("pg-main");
    let stdout = text(&out.stdout);
    // This machine's PostgreSQL keeps its defaults: findings, so exit 1.
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(stdout.contains("connect_public"), "{stdout}");
    assert!(
        stdout.contains("fix: REVOKE CONNECT ON DATABASE"),
        "{stdout}"
    );
    assert!(stdout.contains("large_objects_public"), "{stdout}");
    assert!(!stdout.contains(&pg), "the URL is not printed: {stdout}");
    let token = run("svc");
    assert_eq!(token.status.code(), Some(2));
    assert!(
        text(&token.stderr).contains("only database backends"),
        "{}",
        show(&token)
    );
    let missing = run("nope");
    assert_eq!(missing.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}
