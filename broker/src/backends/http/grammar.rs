//! Resources of kind `http`: `BACKEND:/path`, with the HTTP method as the action,
//! and the one spelling a request target is reduced to before policy sees it.
//!
//! Why a normaliser and not only a check: a forbid written for `/admin` must
//! hold for every spelling an upstream reads as `/admin` — `/%61dmin`,
//! `/admin/`, `/x/../admin`, `/admin;jsessionid=1`, `//admin`. So a request
//! target is decoded where decoding cannot change its meaning (escapes of
//! unreserved characters, lower-case hex), refused where upstreams disagree
//! about its meaning (dot and empty segments, an escaped `/` or `\`, `;`,
//! control bytes, a fragment), and the trailing slash is not part of the
//! resource (`/admin/` is decided as `/admin`). What is forwarded is the
//! normalised target, so the upstream receives exactly what was decided.

use crate::backends::grammar::{is_allowed, is_canonical, Invalid};

/// `*` stands for any run of characters, `/` included (Cedar's `like`).
pub const WILDCARDS: &[char] = &['*'];

/// A permit for `/repos/acme/*` grants the set `/repos/acme/x/*`.
pub const INCLUSION_GRANTS: bool = true;

/// The actions of the kind: the HTTP methods the gateway relays.
pub const METHODS: [&str; 6] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"];

/// Longest path accepted (policy's resource is `BACKEND:` plus this).
pub const MAX_PATH: usize = 400;

fn is_unreserved(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~')
}

/// Characters a path may carry as they are (RFC 3986 `pchar` and `/`, without `;`).
fn is_path_char(c: u8) -> bool {
    is_unreserved(c)
        || matches!(
            c,
            b'!' | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b'='
                | b':'
                | b'@'
                | b'/'
        )
}

fn hex(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// What an escape of byte `v` in a path becomes: the character itself when a
/// path may carry it as it is (an upstream that decodes reads the two spellings
/// as one), `None` when it stays escaped, or a refusal where upstreams
/// disagree (`/`, `\`, `%` — a double encoding —, `;`, control bytes).
fn unescape(v: u8) -> Result<Option<char>, Refused> {
    match v {
        b'/' | b'\\' => Err("an escaped / or \\ in the path (upstreams disagree about it)"),
        b'%' => Err("an escaped % in the path (a double encoding)"),
        b';' => Err("an escaped ; in the path (path parameters are read differently upstream)"),
        v if v < 0x20 || v == 0x7f => Err("an escaped control character in the path"),
        v if is_path_char(v) => Ok(Some(v as char)),
        _ => Ok(None),
    }
}

/// Whether `path` is in the kind's one spelling: `/`, or `/` and canonical
/// segments of path characters and upper-case escapes of what must stay escaped.
pub fn is_path(path: &str) -> bool {
    let b = path.as_bytes();
    if path.len() > MAX_PATH || b.first() != Some(&b'/') {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let upper = |c: &u8| c.is_ascii_digit() || (b'A'..=b'F').contains(c);
            let escape = b
                .get(i + 1)
                .filter(|c| upper(c))
                .zip(b.get(i + 2).filter(|c| upper(c)));
            let Some(v) = escape.and_then(|(h, l)| Some(hex(*h)? * 16 + hex(*l)?)) else {
                return false;
            };
            if unescape(v) != Ok(None) {
                return false;
            }
            i += 3;
            continue;
        }
        if !is_path_char(b[i]) {
            return false;
        }
        i += 1;
    }
    path == "/" || is_canonical(&path[1..])
}

/// A request's path and method, then the backend's allow-list.
pub fn check_resource(
    path: &str,
    action: &str,
    allow_list: Option<&[String]>,
) -> Result<(), Invalid> {
    if !is_path(path) {
        return Err(Invalid::Path);
    }
    if !METHODS.contains(&action) || !is_allowed(allow_list, action) {
        return Err(Invalid::Action);
    }
    Ok(())
}

/// A request target reduced to its one spelling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The path policy decides (`BACKEND:` + this): no trailing slash, lower
    /// case when the backend's paths are case-insensitive.
    pub decided: String,
    /// The origin-form target sent upstream: the normalised path (its trailing
    /// slash and case kept) and the query as the tool sent it.
    pub forward: String,
    /// The query's parameters, decoded (`+` is a space), as `name=value`.
    pub query: Vec<String>,
    /// The query as sent, for the audit when `log_query` is on.
    pub raw_query: Option<String>,
}

/// Why a target was refused (said to the tool).
pub type Refused = &'static str;

/// Reduces an origin-form request target (`/path?query`) to its one spelling.
pub fn normalise_target(target: &str, lowercase: bool) -> Result<Target, Refused> {
    if target.contains('#') {
        return Err("a request target carries no fragment");
    }
    let (raw_path, raw_query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    let b = raw_path.as_bytes();
    if b.first() != Some(&b'/') {
        return Err("the request target must be a path starting with /");
    }
    let mut path = String::with_capacity(raw_path.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'%' {
            let v = b
                .get(i + 1)
                .and_then(|h| hex(*h))
                .zip(b.get(i + 2).and_then(|l| hex(*l)))
                .map(|(h, l)| h * 16 + l)
                .ok_or("a malformed percent-escape in the path")?;
            if lowercase && v >= 0x80 {
                // Case folding beyond ASCII differs between upstreams.
                return Err("an escaped non-ASCII character in a case-insensitive path");
            }
            match unescape(v)? {
                Some(c) => path.push(c),
                None => path.push_str(&format!("%{v:02X}")),
            }
            i += 3;
            continue;
        }
        if c == b';' {
            return Err("a ; in the path (path parameters are read differently upstream)");
        }
        if !is_path_char(c) {
            return Err("a character the path may not carry unescaped");
        }
        path.push(c as char);
        i += 1;
    }
    let trimmed = if path.len() > 1 {
        path.strip_suffix('/').unwrap_or(&path)
    } else {
        &path
    };
    if trimmed != "/" && !is_canonical(&trimmed[1..]) {
        return Err("an empty, . or .. segment in the path");
    }
    let decided = if lowercase {
        lower_outside_escapes(trimmed)
    } else {
        trimmed.to_owned()
    };
    if decided.len() > MAX_PATH {
        return Err("the path is too long");
    }
    let query = match raw_query {
        Some(q) => parse_query(q)?,
        None => Vec::new(),
    };
    // A case-insensitive API is sent the spelling decided (its trailing slash kept).
    let sent = if lowercase {
        lower_outside_escapes(&path)
    } else {
        path
    };
    let forward = match raw_query {
        Some(q) => format!("{sent}?{q}"),
        None => sent,
    };
    Ok(Target {
        decided,
        forward,
        query,
        raw_query: raw_query.map(str::to_owned),
    })
}

/// Lower case, except the hex digits of escapes (which stay upper case).
fn lower_outside_escapes(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut keep = 0;
    for c in path.chars() {
        if keep > 0 {
            keep -= 1;
            out.push(c);
        } else {
            if c == '%' {
                keep = 2;
            }
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// Most query parameters policy is shown.
const MAX_PARAMS: usize = 64;

fn is_query_char(c: u8) -> bool {
    is_path_char(c) || c == b'?' || c == b'%'
}

fn decode_component(s: &str) -> Result<String, Refused> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let v = b
                    .get(i + 1)
                    .and_then(|h| hex(*h))
                    .zip(b.get(i + 2).and_then(|l| hex(*l)))
                    .map(|(h, l)| h * 16 + l)
                    .ok_or("a malformed percent-escape in the query")?;
                out.push(v);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    let text = String::from_utf8(out).map_err(|_| "the query is not UTF-8")?;
    if text.chars().any(char::is_control) {
        return Err("a control character in the query");
    }
    Ok(text)
}

fn parse_query(q: &str) -> Result<Vec<String>, Refused> {
    if !q.bytes().all(is_query_char) {
        return Err("a character the query may not carry unescaped");
    }
    let mut params: Vec<String> = Vec::new();
    let mut names: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    for pair in q.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (k, v) = (decode_component(k)?, decode_component(v)?);
        if k.contains('=') {
            // `a%3Db=c` would read as `a=b=c`, the same as `a=b%3Dc`.
            return Err("an escaped = in a query parameter's name");
        }
        if k.eq_ignore_ascii_case("_method") {
            return Err("_method in the query changes the method for some frameworks");
        }
        // Upstreams keep the first, the last or all of a repeated name (some
        // ignoring its case): policy would see a value the API may not act on.
        if names
            .insert(k.to_ascii_lowercase(), v.clone())
            .is_some_and(|before| before != v)
        {
            return Err("a query parameter repeated with another value");
        }
        params.push(format!("{k}={v}"));
        if params.len() > MAX_PARAMS {
            return Err("too many query parameters");
        }
    }
    Ok(params)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decided(t: &str) -> Result<String, Refused> {
        normalise_target(t, false).map(|t| t.decided)
    }

    #[test]
    fn every_spelling_of_a_path_is_decided_as_the_one() {
        for spelling in [
            "/admin",
            "/admin/",
            "/%61dmin",
            "/%61%64%6D%69%6E",
            "/%61%64%6d%69%6e",
        ] {
            assert_eq!(decided(spelling).as_deref(), Ok("/admin"), "{spelling}");
        }
        assert_eq!(decided("/a%20b").as_deref(), Ok("/a%20b"));
        assert_eq!(decided("/a%2a").as_deref(), Ok("/a*"));
        assert_eq!(decided("/v1/k%3Adecrypt").as_deref(), Ok("/v1/k:decrypt"));
        assert_eq!(decided("/%40%3D%21").as_deref(), Ok("/@=!"));
        assert_eq!(decided("/caf%c3%a9").as_deref(), Ok("/caf%C3%A9"));
        assert_eq!(decided("/").as_deref(), Ok("/"));
        let t = normalise_target("/Repos/Acme%7b/", true).unwrap();
        assert_eq!(t.decided, "/repos/acme%7B");
        assert_eq!(
            t.forward, "/repos/acme%7B/",
            "a case-insensitive API is sent what was decided"
        );
    }

    #[test]
    fn spellings_upstreams_read_differently_are_refused() {
        for bad in [
            "//admin",
            "/x/../admin",
            "/x/%2E%2E/admin",
            "/./admin",
            "/admin/.",
            "/a%2Fb",
            "/a%2fb",
            "/a%5Cb",
            "/%2561dmin",
            "/a%3Bb",
            "/a\\b",
            "/admin;x=1",
            "/a b",
            "/a%00",
            "/a%0a",
            "/a%zz",
            "/a%4",
            "admin",
            "*",
            "http://x/admin",
            "/admin#x",
            "/ä",
            "/admin//",
        ] {
            assert!(decided(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_query_is_shown_to_policy_decoded_and_sent_as_written() {
        let t = normalise_target("/search?q=a+b&state=open&x=%C3%A4&flag", false).unwrap();
        assert_eq!(t.query, ["q=a b", "state=open", "x=ä", "flag="]);
        assert_eq!(t.forward, "/search?q=a+b&state=open&x=%C3%A4&flag");
        assert!(normalise_target("/s?x=%0a", false).is_err());
        assert!(normalise_target("/s?x=%ff", false).is_err());
        assert!(normalise_target("/s?x=\"", false).is_err());
        assert!(normalise_target("/s?x=1;visibility=public", false).is_err());
        assert!(normalise_target("/s?state=open&state=closed", false).is_err());
        assert!(normalise_target("/s?id=1&id=1", false).is_ok());
        assert!(normalise_target("/s?state=open&State=closed", false).is_err());
        assert!(normalise_target("/s?a%3Db=c", false).is_err());
        assert!(normalise_target("/s?_method=DELETE", false).is_err());
        assert!(normalise_target("/users/JOS%C3%89", true).is_err());
        assert!(normalise_target("/users/JOS%C3%89", false).is_ok());
    }

    #[test]
    fn paths_in_the_grammar() {
        for ok in ["/", "/repos/acme/x", "/repos/acme/*", "/a%20b", "/v1/x:run"] {
            assert!(is_path(ok), "{ok}");
        }
        for bad in [
            "", "repos", "/a/", "//a", "/a/../b", "/%61", "/a%2F", "/a%2a", "/a;b",
        ] {
            assert!(!is_path(bad), "{bad}");
        }
    }

    /// `path` with the characters at `which` percent-escaped (upper or lower hex).
    fn escaped(path: &str, which: &[bool], lower: bool) -> String {
        path.chars()
            .zip(which.iter().cycle())
            .map(|(c, e)| match (*e && c != '/', lower) {
                (true, false) => format!("%{:02X}", c as u8),
                (true, true) => format!("%{:02x}", c as u8),
                (false, _) => c.to_string(),
            })
            .collect()
    }

    proptest! {
        /// Two spellings an upstream decodes to one path are decided as one:
        /// escaping any characters of a path never changes what policy sees
        /// (or the escaped spelling is refused outright).
        #[test]
        fn every_escaped_spelling_is_decided_the_same(
            path in "(/[a-zA-Z0-9._~!$&'()*+,=:@-]{1,6}){1,4}/?",
            which in proptest::collection::vec(any::<bool>(), 1..12),
            lower in any::<bool>(),
            insensitive in any::<bool>(),
        ) {
            let plain = normalise_target(&path, insensitive);
            let spelt = escaped(&path, &which, lower);
            if let (Ok(p), Ok(s)) = (&plain, normalise_target(&spelt, insensitive)) {
                prop_assert_eq!(&p.decided, &s.decided, "{} vs {}", path, spelt);
                prop_assert_eq!(&p.forward, &s.forward);
            }
            if plain.is_err() {
                prop_assert!(normalise_target(&spelt, insensitive).is_err(), "{}", spelt);
            }
        }

        /// Whatever a tool sends, what policy decides is in the grammar, and
        /// what is forwarded is decided the same way again.
        #[test]
        fn normalised_targets_are_in_the_grammar(target in "/[a-zA-Z0-9%/.;:@*+=&?~_-]{0,40}") {
            if let Ok(t) = normalise_target(&target, false) {
                prop_assert!(is_path(&t.decided), "{:?}", t);
                let again = normalise_target(&t.forward, false).unwrap();
                prop_assert_eq!(&again.decided, &t.decided);
                prop_assert!(check_resource(&t.decided, "GET", None).is_ok());
            }
        }
    }
}
