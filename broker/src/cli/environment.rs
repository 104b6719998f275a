//! The environment `tessera exec` gives the command: emptied down to a few
//! basics, plus the names `--keep-env` keeps and the variables of
//! `--env-file`, never any that carries a secret of the run or of a broker.
//!
//! Why a module of its own: what may reach the command is the security
//! boundary of `exec`, so its rules and their tests are kept in one place,
//! apart from how credentials are obtained and the command is run.

use std::collections::BTreeMap;
use std::path::Path;

/// Variables that survive the scrub when the parent has them.
const BASICS: &[&str] = &[
    "PATH", "HOME", "LANG", "LANGUAGE", "TERM", "TZ", "USER", "LOGNAME", "SHELL", "TMPDIR",
];

/// Whether `name` is never handed to the child, whatever is asked: the run
/// token's variables and every other `TESSERA_*` one (the broker's own
/// secrets — KEK, store URL, TLS key, admin token — may be in the environment
/// of a sandbox started next to a broker) but the broker's address and CA,
/// and every `*_URL` (a backend's `url_env` names one holding the broker's
/// database password; a parent's `DATABASE_URL` is exactly what `--db`
/// replaces).
fn never_passed(name: &str) -> bool {
    let address = matches!(name, "TESSERA_ADDR" | "TESSERA_CA_FILE");
    NEVER.contains(&name) || (name.starts_with("TESSERA_") && !address) || name.ends_with("_URL")
}

/// Named explicitly (the rule in [`never_passed`] covers them too).
const NEVER: &[&str] = &[
    "TESSERA_RUN_TOKEN",
    "TESSERA_RUN_TOKEN_FILE",
    "TESSERA_RUN_TOKEN_FD",
    "TESSERA_ALLOW_TOKEN_ENV",
    "TESSERA_ADMIN_TOKEN_FILE",
    "TESSERA_KEK",
    "TESSERA_KEK_FILE",
    "TESSERA_STORE_URL",
    "TESSERA_TLS_KEY_FILE",
];

/// The scrubbed environment: basics, kept names, the env file.
pub fn base_environment(
    parent: &BTreeMap<String, String>,
    keep: &[String],
    env_file: Option<&Path>,
) -> Result<BTreeMap<String, String>, String> {
    let mut env = BTreeMap::new();
    for (k, v) in parent {
        if BASICS.contains(&k.as_str()) || k.starts_with("LC_") {
            env.insert(k.clone(), v.clone());
        }
    }
    for name in keep {
        if !is_env_name(name) {
            return Err(format!("--keep-env: {name:?} is not a variable name"));
        }
        if never_passed(name) {
            return Err(format!("--keep-env: {name} is never passed to the command"));
        }
        if let Some(v) = parent.get(name) {
            env.insert(name.clone(), v.clone());
        }
    }
    if let Some(path) = env_file {
        // dotenvy reads the file as a .env file: quotes, `export`, comments and
        // escapes as other tools read them. It would also expand `$VAR` and
        // `${VAR}` from exec's own environment, which may hold what the command
        // must never see (the run token's file, a broker's secrets), and its
        // rules for where that happens span lines and quotes: a `$` anywhere in
        // the file is refused. The file is read once, so what was checked is
        // what is parsed.
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--env-file: cannot read {}: {e}", path.display()))?;
        refuse_expansion(path, &text)?;
        let items = dotenvy::from_read_iter(text.as_bytes());
        for item in items {
            let (k, v) = item.map_err(|e| format!("--env-file: {}: {e}", path.display()))?;
            if !is_env_name(&k) {
                return Err(format!(
                    "--env-file: {}: {k:?} is not a variable name",
                    path.display()
                ));
            }
            if never_passed(&k) {
                return Err(format!("--env-file: {k} is never passed to the command"));
            }
            env.insert(k, v);
        }
    }
    Ok(env)
}

/// Refuses an env file with a `$` in it (see [`base_environment`]).
fn refuse_expansion(path: &Path, text: &str) -> Result<(), String> {
    match text.lines().position(|line| line.contains('$')) {
        None => Ok(()),
        Some(n) => Err(format!(
            "--env-file: {}:{}: `$` is refused in an env file: it could expand a variable of \
             exec's own environment, which the command must not see; pass such a value with \
             --keep-env instead",
            path.display(),
            n + 1
        )),
    }
}

fn is_env_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && !s.as_bytes()[0].is_ascii_digit()
        && s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_is_scrubbed() {
        let parent: BTreeMap<String, String> = [
            ("PATH", "/bin"),
            ("HOME", "/home/a"),
            ("LC_TIME", "C"),
            ("AWS_SECRET_ACCESS_KEY", "parent-secret"),
            ("DATABASE_URL", "postgres://prod"),
            ("KEEP_ME", "yes"),
            ("TESSERA_RUN_TOKEN_FILE", "/run/token"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let env = base_environment(&parent, &["KEEP_ME".into()], None).unwrap();
        let keys: Vec<&str> = env.keys().map(String::as_str).collect();
        assert_eq!(keys, ["HOME", "KEEP_ME", "LC_TIME", "PATH"]);
        assert!(base_environment(&parent, &["TESSERA_RUN_TOKEN_FILE".into()], None).is_err());
        for name in [
            "TESSERA_ANYTHING",
            "DATABASE_URL",
            "PROD_PG_URL",
            "TESSERA_KEK",
        ] {
            assert!(never_passed(name), "{name}");
        }
        for name in ["TESSERA_ADDR", "TESSERA_CA_FILE", "KEEP_ME", "URL_PREFIX"] {
            assert!(!never_passed(name), "{name}");
        }
        assert!(base_environment(&parent, &["BAD-NAME".into()], None).is_err());
    }

    /// The env file is a .env file as other tools read it (issue 15: quotes
    /// and `# comments` were kept literally), and it cannot pull a variable of
    /// exec's own environment into the command's.
    #[test]
    fn the_env_file_is_read_as_dotenv() {
        let dir = std::env::temp_dir().join(format!("tessera-envfile-{}", crate::ids::new_id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(".env");
        std::fs::write(
            &file,
            "# a comment\nexport PLAIN=value\nQUOTED=\"two words\"\nSINGLE='lit#eral'\n\
             TRAILING=x # note\nEMPTY=\n",
        )
        .unwrap();
        let env = base_environment(&BTreeMap::new(), &[], Some(&file)).unwrap();
        let get = |k: &str| env.get(k).map(String::as_str);
        assert_eq!(get("PLAIN"), Some("value"));
        assert_eq!(get("QUOTED"), Some("two words"));
        assert_eq!(get("SINGLE"), Some("lit#eral"));
        assert_eq!(get("TRAILING"), Some("x"));
        assert_eq!(get("EMPTY"), Some(""));
        assert_eq!(env.len(), 5, "{env:?}");
        // Every way found to make dotenvy expand past a per-line check (a
        // review's): after a closing quote, a continuation line read as a
        // comment, a continuation line that starts with a quote.
        for (text, says) in [
            ("X=$HOME\n", "`$` is refused"),
            ("X=\"${TESSERA_ADMIN_TOKEN}\"\n", "`$` is refused"),
            ("X='lit$eral'\n", "`$` is refused"),
            ("X='a'${TESSERA_RUN_TOKEN_FILE}\n", "`$` is refused"),
            ("export X=''$HOME\n", "`$` is refused"),
            ("X=\"a\n#${TESSERA_RUN_TOKEN_FILE}\"\n", "`$` is refused"),
            ("X=\"a\nb='${TESSERA_RUN_TOKEN_FILE}\"\n", "`$` is refused"),
            ("TESSERA_ADMIN_TOKEN=x\n", "never passed"),
            ("DATABASE_URL=postgres://x\n", "never passed"),
            ("X='unterminated\n", "--env-file"),
        ] {
            std::fs::write(&file, text).unwrap();
            let e = base_environment(&BTreeMap::new(), &[], Some(&file)).unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
