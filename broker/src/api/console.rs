//! `/console`: the web console's files (`broker/console/`), built into the
//! binary, so it works offline and what is served is what was reviewed.
//!
//! Why these headers: the console handles approver and admin keys, so it
//! must run no script but its own. The Content-Security-Policy allows only
//! same-origin scripts, styles and fetches, no inline code, no framing and
//! no forms; the key lives in `sessionStorage` and goes out as a bearer
//! header, never a cookie, so there is no ambient credential to forge a
//! request with. These routes are not API operations and are not in the
//! OpenAPI document.

use crate::app::AppState;
use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// The policy every console response carries.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// Every file of `broker/console/`, with its type (a test keeps the list whole).
const FILES: &[(&str, &str, &str)] = &[
    ("index.html", HTML, include_str!("../../console/index.html")),
    ("app.js", JS, include_str!("../../console/app.js")),
    ("lib.js", JS, include_str!("../../console/lib.js")),
    (
        "approvals.js",
        JS,
        include_str!("../../console/approvals.js"),
    ),
    ("admin.js", JS, include_str!("../../console/admin.js")),
    ("style.css", CSS, include_str!("../../console/style.css")),
];

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/console", get(index))
        .route("/console/", get(index))
        .route("/console/{file}", get(file))
}

async fn index() -> Response {
    serve("index.html")
}

async fn file(Path(name): Path<String>) -> Response {
    serve(&name)
}

fn serve(name: &str) -> Response {
    let Some((_, kind, body)) = FILES.iter().find(|(n, _, _)| *n == name) else {
        return (StatusCode::NOT_FOUND, "not found").into_response();
    };
    let mut resp = (*body).into_response();
    let h = resp.headers_mut();
    for (k, v) in [
        (header::CONTENT_TYPE, *kind),
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::CACHE_CONTROL, "no-cache"),
    ] {
        h.insert(k, HeaderValue::from_static(v));
    }
    h.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    resp
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_console_file_is_served() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/console");
        let mut on_disk: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        on_disk.sort();
        let mut served: Vec<String> = super::FILES.iter().map(|(n, _, _)| n.to_string()).collect();
        served.sort();
        assert_eq!(
            on_disk, served,
            "broker/console/ and console.rs FILES differ"
        );
    }

    #[test]
    fn the_policy_allows_no_inline_code() {
        let csp = super::CONTENT_SECURITY_POLICY;
        assert!(!csp.contains("unsafe"));
        assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"));
        for (name, _, body) in super::FILES {
            if name.ends_with(".html") {
                assert!(
                    !body.contains("<script>") && !body.contains(" style="),
                    "{name}"
                );
            }
        }
    }
}
