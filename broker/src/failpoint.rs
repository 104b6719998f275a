//! Failpoints: named places where a debug build can be told to crash or stall,
//! so tests can kill the real binary at an exact step (between claiming a
//! revocation and removing the user, between cutting sessions and dropping, …)
//! and then assert on what the next start does.
//!
//! `TESSERA_FAILPOINTS="revocation.after_claim=abort,revocation.before_drop=sleep(30000)"`:
//! `abort` ends the process at once, without unwinding or flushing (what
//! `kill -9` does); `sleep(MS)` stalls the task there, so a test can send a
//! signal while work is held. Release builds compile every failpoint to nothing
//! (`cfg(debug_assertions)`), so no environment variable can crash a deployed broker.

/// Reaches failpoint `name`; in a release build, does nothing.
pub async fn hit(name: &str) {
    #[cfg(debug_assertions)]
    match action(name) {
        Some(Action::Abort) => {
            eprintln!("tessera: failpoint {name}: abort");
            std::process::abort();
        }
        Some(Action::Sleep(ms)) => {
            eprintln!("tessera: failpoint {name}: sleeping {ms} ms");
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        }
        None => {}
    }
    #[cfg(not(debug_assertions))]
    let _ = name;
}

#[cfg(debug_assertions)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Abort,
    Sleep(u64),
}

#[cfg(debug_assertions)]
fn action(name: &str) -> Option<Action> {
    static SET: std::sync::OnceLock<Vec<(String, Action)>> = std::sync::OnceLock::new();
    SET.get_or_init(|| parse(&std::env::var("TESSERA_FAILPOINTS").unwrap_or_default()))
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, a)| *a)
}

#[cfg(debug_assertions)]
fn parse(text: &str) -> Vec<(String, Action)> {
    text.split(',')
        .filter_map(|item| {
            let (name, act) = item.trim().split_once('=')?;
            let act = match act.trim() {
                "abort" => Action::Abort,
                other => Action::Sleep(
                    other
                        .strip_prefix("sleep(")?
                        .strip_suffix(')')?
                        .parse()
                        .ok()?,
                ),
            };
            Some((name.trim().to_owned(), act))
        })
        .collect()
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use super::*;

    #[test]
    fn parses_actions_and_ignores_garbage() {
        let set = parse("a=abort, b=sleep(250),c=explode,d");
        assert_eq!(
            set,
            vec![
                ("a".to_owned(), Action::Abort),
                ("b".to_owned(), Action::Sleep(250))
            ]
        );
    }
}
