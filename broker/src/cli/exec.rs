//! `tessera exec`: runs a command with an emptied environment plus only the
//! credentials asked for, and revokes them when it exits.
//!
//! Why `exec` empties the environment: a tool started by an agent inherits
//! whatever its parent had — cloud keys, database URLs, tokens. `exec` starts the
//! tool with only the basics (PATH, HOME, locale, terminal, time zone, user, temp
//! dir), the names the caller keeps explicitly, and the credentials asked for on
//! the command line; the run token itself never passes to the child. When the
//! child exits — normally, by a signal, or killed — the capabilities obtained for
//! it are revoked, downstream credentials included.
//!
//! Why its own file: `exec` is one flow (check, obtain, run, revoke) whose
//! order matters; this file owns its clap type and that flow, and uses the
//! parts that have rules of their own: [`super::grants`] (what is asked for),
//! [`super::environment`] (what reaches the command), [`super::holds`],
//! [`super::egress`] and [`super::trust`] (`--egress`), [`super::child`] (the
//! process tree).

use super::egress::Egress;
use super::environment::base_environment;
use super::grants::GrantSpec;
use super::holds::{Holder, EXIT_HOLD_LAPSED};
use super::sandbox::{runtime, say, warnings_to_stderr};
use super::trust::TrustBundle;
use clap::Args;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tessera_client::{Capability, Client, Error, Exchanged};

/// `tessera exec` exits with this when Tessera itself failed (like `env`, `timeout`).
const EXIT_TESSERA: u8 = 125;
const EXIT_CANNOT_EXECUTE: u8 = 126;
const EXIT_NOT_FOUND: u8 = 127;
/// The command ran, but a capability obtained for it could not be revoked
/// after retries: the command's own code is replaced so that this is seen.
const EXIT_REVOKE_FAILED: u8 = 124;
/// Revocation attempts per capability at exit.
const REVOKE_ATTEMPTS: u32 = 3;

#[derive(Debug, Args)]
pub struct ExecArgs {
    /// AWS credentials for ACTION=RESOURCE, as AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
    /// AWS_SESSION_TOKEN, AWS_CREDENTIAL_EXPIRATION, AWS_REGION and AWS_DEFAULT_REGION.
    /// Repeatable: NAME@ACTION=RESOURCE puts a credential under NAME_ (NAME_AWS_REGION, …).
    #[arg(long = "aws", value_name = "[NAME@]ACTION=RESOURCE")]
    pub aws: Vec<String>,
    /// A database user for ACTION=RESOURCE, as PGHOST/PGUSER/PGPASSWORD/… (PostgreSQL)
    /// or MYSQL_HOST/MYSQL_USER/MYSQL_PWD/… (MariaDB, MySQL), plus DATABASE_URL.
    /// Repeatable: NAME@ACTION=RESOURCE puts a credential under NAME_ (NAME_PGUSER, …).
    #[arg(long = "db", value_name = "[NAME@]ACTION=RESOURCE")]
    pub db: Vec<String>,
    /// An access token for ACTION=RESOURCE on a `token` backend, as TESSERA_ACCESS_TOKEN.
    /// Repeatable: NAME@ACTION=RESOURCE sets NAME_TESSERA_ACCESS_TOKEN.
    #[arg(long = "token", value_name = "[NAME@]ACTION=RESOURCE")]
    pub token: Vec<String>,
    /// Every capability `exec` obtains lapses unless `exec` renews it within
    /// this long (2s-3600s): if `exec` is killed before it can revoke, the
    /// broker revokes them itself soon after. Renewed every third of it.
    #[arg(long, value_name = "DURATION", default_value = "15s")]
    pub hold: String,
    /// After SIGTERM/SIGINT/SIGHUP/SIGQUIT is forwarded, or the command exits
    /// leaving processes behind, how long they get before SIGKILL.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub grace: String,
    /// What exactly the command will do, as a JSON object, for every grant:
    /// shown to approvers, hashed into each capability's `args` claim, seen by
    /// policy as `context.arguments`.
    #[arg(long, value_name = "JSON")]
    pub arguments: Option<String>,
    /// When a grant needs a human approval, wait up to this long for it
    /// (the status is printed on stderr), then run the command; 0s: do not wait.
    /// With --egress, also how long the relay waits when the gateway holds a
    /// connection or a request without a body for an approval, before it sends
    /// it again (approved) or hands the command the refusal.
    #[arg(long, value_name = "DURATION", default_value = "15m")]
    pub approval_wait: String,
    /// Run the command as this user (name or uid; exec must be root): the
    /// command can then neither read a token file that only root may, nor read
    /// exec's /proc entries, nor signal exec. Its HOME, USER and LOGNAME are
    /// the user's; supplementary groups are dropped.
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    /// With --user: this group (name or gid) instead of the user's own.
    #[arg(long, value_name = "GROUP", requires = "user")]
    pub group: Option<String>,
    /// Keep this variable of the parent environment (repeatable).
    #[arg(long = "keep-env", value_name = "NAME")]
    pub keep_env: Vec<String>,
    /// Add the variables of this .env file to the child's environment (dotenv
    /// syntax: quotes, `export`, comments; no variable is expanded).
    #[arg(long, value_name = "FILE")]
    pub env_file: Option<PathBuf>,
    /// Send the command's HTTP(S) traffic through the broker's egress gateway at
    /// HOST:PORT (`[gateway] listen`): its proxy variables point at a relay of
    /// exec's that adds the run's credentials, so the command never holds the
    /// run token; the gateway decides and audits every connection (docs/gateway.md).
    #[arg(long, value_name = "HOST:PORT", env = "TESSERA_GATEWAY")]
    pub egress: Option<String>,
    /// With --egress and --user (Linux, as root): run the command in a network
    /// namespace of its own whose only way out is the gateway, so a tool that
    /// ignores the proxy variables reaches nothing. The command must not be root
    /// (root could join another namespace), hence --user.
    #[arg(long, requires_all = ["egress", "user"])]
    pub isolate_net: bool,
    /// The command and its arguments, after `--`.
    #[arg(required = true, last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `--approval-wait`: a duration, or zero (`0`, `0s`, `0m`…) for not waiting,
/// which the duration grammar (lifetimes, all positive) does not take.
fn parse_approval_wait(text: &str) -> Result<std::time::Duration, String> {
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    if !digits.is_empty() && digits.bytes().all(|b| b == b'0') {
        return Ok(std::time::Duration::ZERO);
    }
    crate::grammar::parse_duration(text).map_err(|e| e.to_string())
}

/// `tessera exec`.
///
/// Before any secret is read, `exec` makes itself non-dumpable: a process of
/// the same user — the command it runs — can then no longer open its
/// `/proc/PID/environ`, `mem` or `fd/*` (the kernel requires ptrace access,
/// which a non-dumpable process refuses to all but CAP_SYS_PTRACE), where the
/// run token, its file's path, and every credential `exec` holds would be.
/// The run token is read (from its file or descriptor) before the runtime
/// starts, then every inherited descriptor above stderr is closed, the
/// token's included, so the command inherits none of them.
pub fn run(args: ExecArgs) -> ExitCode {
    warnings_to_stderr();
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        say!("tessera exec: cannot make this process non-dumpable: {e}");
        return ExitCode::from(EXIT_TESSERA);
    }
    let client = match Client::from_env() {
        Ok(c) => c,
        Err(e) => {
            say!("tessera exec: {e}");
            return ExitCode::from(EXIT_TESSERA);
        }
    };
    close_inherited_descriptors();
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            say!("tessera exec: {e}");
            return ExitCode::from(EXIT_TESSERA);
        }
    };
    rt.block_on(exec_async(args, client))
}

/// Closes every descriptor above stderr (before the runtime opens its own).
fn close_inherited_descriptors() {
    let open: Vec<i32> = match std::fs::read_dir("/proc/self/fd") {
        Ok(dir) => dir
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .filter(|fd| *fd > 2)
            .collect(),
        Err(_) => return,
    };
    for fd in open {
        // The listing's own descriptor is already closed: EBADF, ignored.
        let _ = nix::unistd::close(fd);
    }
}

/// `--hold` and `--grace`, checked before anything is obtained.
fn timings(args: &ExecArgs) -> Result<(Duration, Duration), String> {
    let parse =
        |flag: &str, v: &str| crate::grammar::parse_duration(v).map_err(|e| format!("{flag}: {e}"));
    let hold = parse("--hold", &args.hold)?;
    if !(2..=3600).contains(&hold.as_secs()) {
        return Err("--hold: must be between 2s and 3600s".into());
    }
    Ok((hold, parse("--grace", &args.grace)?))
}

/// What `exec` checked and prepared before it asks for anything.
struct Prepared {
    hold: Duration,
    grace: Duration,
    grants: Vec<GrantSpec>,
    /// The environment `exec` was started with.
    parent: BTreeMap<String, String>,
    /// The command's environment, before its credentials are added.
    env: BTreeMap<String, String>,
    identity: Option<Identity>,
}

async fn exec_async(args: ExecArgs, client: Client) -> ExitCode {
    let Prepared {
        hold,
        grace,
        grants,
        parent,
        mut env,
        identity,
    } = match prepare(&args) {
        Ok(p) => p,
        Err(e) => {
            say!("tessera exec: {e}");
            return ExitCode::from(EXIT_TESSERA);
        }
    };
    // Handlers first: a signal while credentials are being obtained must not
    // kill `exec` with them unrevoked.
    let mut signals = forwarded_signals();
    let holder = Holder::start(client.clone(), hold);
    let mut held: Vec<Capability> = Vec::new();
    let obtained = obtain_unless_stopped(
        &client,
        &args,
        &grants,
        &mut env,
        &mut held,
        &holder,
        &mut signals,
    )
    .await;
    if let Err((code, why)) = obtained {
        return not_started(&client, &held, code, &why).await;
    }
    let (egress, trust) = match egress_and_trust(&client, &args, &parent, &mut env).await {
        Ok(started) => started,
        Err(why) => return not_started(&client, &held, EXIT_TESSERA, &why).await,
    };
    let code = run_child(
        &args.command,
        &env,
        egress.as_ref().and_then(|e| e.netns.as_ref()),
        identity.as_ref(),
        &mut signals,
        &holder,
        grace,
    )
    .await;
    drop(egress);
    drop(trust);
    drop(holder);
    if revoke_all(&client, &held).await {
        ExitCode::from(code)
    } else {
        ExitCode::from(EXIT_REVOKE_FAILED)
    }
}

/// Checks the flags and prepares the command's environment and user, all
/// before anything is obtained.
fn prepare(args: &ExecArgs) -> Result<Prepared, String> {
    let (hold, grace) = timings(args)?;
    let grants = super::grants::parse_all(&args.token, &args.aws, &args.db)?;
    let parent: BTreeMap<String, String> = std::env::vars().collect();
    let mut env = base_environment(&parent, &args.keep_env, args.env_file.as_deref())?;
    let identity = run_as(args.user.as_deref(), args.group.as_deref())?;
    if let (Some(id), Some(file)) = (&identity, parent.get("TESSERA_RUN_TOKEN_FILE")) {
        use std::os::unix::fs::MetadataExt;
        // Its mode was checked when it was read (no group or other bits): the
        // owner is the one who could still read it.
        if std::fs::metadata(file).is_ok_and(|m| m.uid() == id.uid) {
            return Err(format!(
                "--user {}: the run token file belongs to that user, so the command \
                 could read it; make it root's (chown root, mode 600)",
                id.name
            ));
        }
    }
    if let Some(id) = &identity {
        env.insert("HOME".into(), id.home.clone());
        env.insert("USER".into(), id.name.clone());
        env.insert("LOGNAME".into(), id.name.clone());
    }
    Ok(Prepared {
        hold,
        grace,
        grants,
        parent,
        env,
        identity,
    })
}

/// [`obtain`], while a forwarded signal or the holds lapsing stop `exec`: the
/// fetch in flight is let finish (its ids are needed to revoke it), then the
/// caller revokes everything. On failure, the exit code and why the command
/// was not started.
async fn obtain_unless_stopped(
    client: &Client,
    args: &ExecArgs,
    grants: &[GrantSpec],
    env: &mut BTreeMap<String, String>,
    held: &mut Vec<Capability>,
    holder: &Holder,
    signals: &mut Forwarded,
) -> Result<(), (u8, String)> {
    let mut stopped_by = None;
    let mut lapsed = false;
    let obtained = {
        let fetch = obtain(client, args, grants, env, held, holder);
        tokio::pin!(fetch);
        loop {
            tokio::select! {
                r = &mut fetch => break r,
                sig = next_signal(signals), if stopped_by.is_none() => stopped_by = sig,
                _ = holder.lapsed(), if !lapsed => lapsed = true,
            }
        }
    };
    if lapsed {
        return Err((
            EXIT_HOLD_LAPSED,
            "the holds lapsed while obtaining credentials; the command was not started".into(),
        ));
    }
    if let Some(sig) = stopped_by {
        return Err((
            128u8.saturating_add(sig as u8),
            format!("{sig} while obtaining credentials; the command was not started"),
        ));
    }
    obtained.map_err(|e| (EXIT_TESSERA, e.to_string()))
}

/// With `--egress`: the relay started and its proxy variables in `env`, and,
/// when the broker injects credentials, the run's CA and placeholders too
/// (without injection, none: the command trusts what it trusted). Else why
/// the command cannot be started.
async fn egress_and_trust(
    client: &Client,
    args: &ExecArgs,
    parent: &BTreeMap<String, String>,
    env: &mut BTreeMap<String, String>,
) -> Result<(Option<Egress>, Option<TrustBundle>), String> {
    let insecure = parent
        .get("TESSERA_INSECURE_HTTP")
        .is_some_and(|v| v == "1");
    let approval_wait =
        parse_approval_wait(&args.approval_wait).map_err(|e| format!("--approval-wait: {e}"))?;
    let egress = args
        .egress
        .as_deref()
        .map(|gateway| {
            super::egress::start(
                gateway,
                client.proxy_authorization(),
                args.isolate_net,
                insecure,
                super::egress::Approvals {
                    client: client.clone(),
                    wait: approval_wait,
                },
            )
        })
        .transpose()?;
    if let Some(e) = &egress {
        env.extend(e.environment());
    }
    let trust = match &egress {
        Some(_) => match client.gateway_session().await {
            Ok(session) => Some(super::trust::install(&session, env)?),
            Err(e) if e.code() == Some("not_found") => None,
            Err(e) => return Err(format!("--egress: the run's gateway session: {e}")),
        },
        None => None,
    };
    Ok((egress, trust))
}

/// The command was not started: revokes what was obtained first (nothing that
/// follows may stand in its way), then says why; `code` unless revocation failed.
async fn not_started(client: &Client, held: &[Capability], code: u8, why: &str) -> ExitCode {
    let revoked = revoke_all(client, held).await;
    say!("tessera exec: {why}");
    ExitCode::from(if revoked { code } else { EXIT_REVOKE_FAILED })
}

/// Whom `--user`/`--group` name.
struct Identity {
    uid: u32,
    gid: u32,
    name: String,
    home: String,
}

/// Resolves `--user` and `--group`: only root may switch, and never to root
/// (the command would be as strong as `exec`).
fn run_as(user: Option<&str>, group: Option<&str>) -> Result<Option<Identity>, String> {
    use nix::unistd::{Gid, Group, Uid, User};
    let Some(user) = user else { return Ok(None) };
    if !nix::unistd::geteuid().is_root() {
        return Err("--user: exec must run as root to start the command as another user".into());
    }
    let found = match user.parse::<u32>() {
        Ok(uid) => User::from_uid(Uid::from_raw(uid)),
        Err(_) => User::from_name(user),
    };
    let u = found
        .map_err(|e| format!("--user {user}: {e}"))?
        .ok_or_else(|| format!("--user: no user {user:?}"))?;
    if u.uid.is_root() {
        return Err("--user: the command may not run as root".into());
    }
    let gid = match group {
        None => u.gid,
        Some(g) => {
            let found = match g.parse::<u32>() {
                Ok(gid) => Group::from_gid(Gid::from_raw(gid)),
                Err(_) => Group::from_name(g),
            };
            found
                .map_err(|e| format!("--group {g}: {e}"))?
                .ok_or_else(|| format!("--group: no group {g:?}"))?
                .gid
        }
    };
    if gid.as_raw() == 0 {
        return Err("--group: the command may not run in group root".into());
    }
    Ok(Some(Identity {
        uid: u.uid.as_raw(),
        gid: gid.as_raw(),
        name: u.name,
        home: u.dir.display().to_string(),
    }))
}

/// Obtains what was asked for; every capability obtained is pushed to `held`
/// at once, so a later failure still revokes it.
async fn obtain(
    client: &Client,
    args: &ExecArgs,
    grants: &[GrantSpec],
    env: &mut BTreeMap<String, String>,
    held: &mut Vec<Capability>,
    holder: &Holder,
) -> Result<(), Error> {
    let arguments: Option<serde_json::Value> = args
        .arguments
        .as_deref()
        .map(serde_json::from_str)
        .transpose()
        .map_err(|e| Error::Config(format!("--arguments: not JSON: {e}")))?;
    let wait = parse_approval_wait(&args.approval_wait)
        .map_err(|e| Error::Config(format!("--approval-wait: {e}")))?;
    let status = |a: &tessera_client::types::Approval| {
        let rules: Vec<String> = a.approvers.iter().map(ToString::to_string).collect();
        eprintln!(
            "tessera: approval {} for {} on {} is {} (approvers: {}; expires {})",
            a.approval_id,
            a.action,
            a.resource,
            a.status.as_str(),
            rules.join("; "),
            a.expires_at
        );
    };
    let ask = |action: &str, resource: &str| {
        let (action, resource) = (action.to_owned(), resource.to_owned());
        let (arguments, status) = (arguments.as_ref(), &status);
        async move {
            let ask = tessera_client::Ask {
                hold: Some(&args.hold),
                arguments,
                wait_for_approval: (!wait.is_zero()).then_some(wait),
                on_approval: Some(status),
                ..Default::default()
            };
            client.capability_with(&action, &resource, &ask).await
        }
    };
    for g in grants {
        let cap = ask(&g.action, &g.resource).await?;
        holder.add(&cap);
        let ex = client.exchange(&cap).await;
        put_credentials(client, g, cap, ex, env, held).await?;
    }
    Ok(())
}

/// Puts the credentials exchanged for `g` into `env`, under its names, and
/// their capability into `held`; `--aws` or `--db` credentials the command
/// could not use are revoked at once.
async fn put_credentials(
    client: &Client,
    g: &GrantSpec,
    cap: Capability,
    ex: Result<Exchanged, Error>,
    env: &mut BTreeMap<String, String>,
    held: &mut Vec<Capability>,
) -> Result<(), Error> {
    let id = cap.id().to_owned();
    match g.flag {
        "--token" => {
            held.push(cap);
            let ex = ex?;
            let token = ex
                .field("token")
                .and_then(|v| v.as_str())
                .ok_or_else(|| Error::Protocol("--token: the backend returned no token".into()))?;
            env.insert(g.var("TESSERA_ACCESS_TOKEN"), token.to_owned());
        }
        "--aws" => {
            let creds = ex.and_then(|ex| tessera_client::AwsCredentials::from_exchange(cap, ex));
            let creds = match creds {
                Ok(c) => c,
                Err(e) => {
                    let _ = client.revoke_id(&id).await;
                    return Err(e);
                }
            };
            env.insert(g.var("AWS_ACCESS_KEY_ID"), creds.access_key_id.clone());
            env.insert(
                g.var("AWS_SECRET_ACCESS_KEY"),
                creds.secret_access_key().to_owned(),
            );
            env.insert(g.var("AWS_SESSION_TOKEN"), creds.session_token().to_owned());
            env.insert(g.var("AWS_CREDENTIAL_EXPIRATION"), creds.expiration.clone());
            if let Some(region) = &creds.region {
                // Both names: the SDKs read AWS_REGION, the CLI and boto3
                // fall back to AWS_DEFAULT_REGION.
                env.insert(g.var("AWS_REGION"), region.clone());
                env.insert(g.var("AWS_DEFAULT_REGION"), region.clone());
            }
            held.push(creds.capability);
        }
        _ => {
            let creds =
                ex.and_then(|ex| tessera_client::DatabaseCredentials::from_exchange(cap, ex));
            let creds = match creds {
                Ok(c) => c,
                Err(e) => {
                    let _ = client.revoke_id(&id).await;
                    return Err(e);
                }
            };
            env.extend(creds.environment().into_iter().map(|(k, v)| (g.var(&k), v)));
            held.push(creds.capability);
        }
    }
    Ok(())
}

/// Revokes every capability in `held`, each retried with backoff; whether all
/// were revoked. What could not be is said on stderr (it still ends with its
/// run or its expiry).
async fn revoke_all(client: &Client, held: &[Capability]) -> bool {
    let mut all = true;
    for cap in held {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match client.revoke(cap).await {
                Ok(_) => break,
                Err(_) if attempt < REVOKE_ATTEMPTS => {
                    tokio::time::sleep(std::time::Duration::from_millis(200 * u64::from(attempt)))
                        .await;
                }
                Err(e) => {
                    all = false;
                    say!(
                        "tessera exec: could not revoke capability {} after {attempt} attempts ({e}); \
                         it ends with its run or its expiry (exit {EXIT_REVOKE_FAILED})",
                        cap.id()
                    );
                    break;
                }
            }
        }
    }
    all
}

type Forwarded = Vec<(tokio::signal::unix::Signal, nix::sys::signal::Signal)>;

/// Handlers for the signals `exec` forwards to the command (and that, before
/// the command runs, stop it cleanly).
fn forwarded_signals() -> Forwarded {
    use nix::sys::signal::Signal;
    use tokio::signal::unix::{signal, SignalKind};
    let kinds = [
        (SignalKind::interrupt(), Signal::SIGINT),
        (SignalKind::terminate(), Signal::SIGTERM),
        (SignalKind::hangup(), Signal::SIGHUP),
        (SignalKind::quit(), Signal::SIGQUIT),
        (SignalKind::user_defined1(), Signal::SIGUSR1),
        (SignalKind::user_defined2(), Signal::SIGUSR2),
    ];
    kinds
        .into_iter()
        .filter_map(|(kind, sig)| signal(kind).ok().map(|s| (s, sig)))
        .collect()
}

/// The next of the forwarded signals to arrive.
async fn next_signal(streams: &mut Forwarded) -> Option<nix::sys::signal::Signal> {
    let (sig, _, _) = futures_util::future::select_all(
        streams
            .iter_mut()
            .map(|(s, sig)| Box::pin(async move { s.recv().await.map(|_| *sig) })),
    )
    .await;
    sig
}

/// Signals that ask the command to stop (and start the grace period).
fn terminates(sig: nix::sys::signal::Signal) -> bool {
    use nix::sys::signal::Signal;
    matches!(
        sig,
        Signal::SIGTERM | Signal::SIGINT | Signal::SIGHUP | Signal::SIGQUIT
    )
}

/// Runs the command with exactly `env` as a process tree of its own
/// (`child`), forwarding signals to its group and renewing the holds; a
/// command that does not stop within `grace` of a terminating signal (or of
/// a lapse) is killed with its group. Returns the exit code to pass on (128 + N
/// when the command died of signal N).
async fn run_child(
    command: &[String],
    env: &BTreeMap<String, String>,
    netns: Option<&std::os::fd::OwnedFd>,
    identity: Option<&Identity>,
    streams: &mut Forwarded,
    holder: &Holder,
    grace: Duration,
) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    let mut cmd = tokio::process::Command::new(&command[0]);
    cmd.args(&command[1..]).env_clear().envs(env);
    let session = match identity {
        Some(_) => super::child::Session::Detached,
        None => super::child::Session::Shared,
    };
    let mut tree =
        match super::child::spawn(cmd, session, netns, identity.map(|id| (id.uid, id.gid))) {
            Ok(t) => t,
            Err(e) => {
                say!("tessera exec: cannot run {}: {e}", command[0]);
                return if e.kind() == std::io::ErrorKind::NotFound {
                    EXIT_NOT_FOUND
                } else {
                    EXIT_CANNOT_EXECUTE
                };
            }
        };
    let mut kill_at: Option<tokio::time::Instant> = None;
    let mut lapsed = false;
    let status = loop {
        tokio::select! {
            status = tree.wait() => break status,
            sig = next_signal(streams) => {
                if let Some(sig) = sig {
                    tree.signal(sig);
                    if terminates(sig) && kill_at.is_none() {
                        kill_at = Some(tokio::time::Instant::now() + grace);
                    }
                }
            }
            _ = holder.lapsed(), if !lapsed => {
                lapsed = true;
                tree.signal(nix::sys::signal::Signal::SIGTERM);
                kill_at.get_or_insert(tokio::time::Instant::now() + grace);
            }
            _ = sleep_until(kill_at) => {
                tree.kill_all();
                kill_at = None;
            }
        }
    };
    tree.finish(grace).await;
    if lapsed {
        return EXIT_HOLD_LAPSED;
    }
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(code), _) => u8::try_from(code).unwrap_or(1),
            (None, Some(sig)) => 128u8.saturating_add(u8::try_from(sig).unwrap_or(0)),
            _ => 1,
        },
        Err(e) => {
            say!("tessera exec: waiting for the command failed: {e}");
            EXIT_TESSERA
        }
    }
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
