//! What the proxy itself answers: a refusal as the HTTP response the tool
//! sees, and the hop-by-hop headers no proxy forwards.
//!
//! Why its own file: the plain proxy and the intercepting one both answer
//! this way; kept in either, the two would import each other.

use super::body::ProxyBody;
use super::refusal::{Code, Refusal};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::Response;

/// A refusal as the HTTP response the tool sees: its JSON body, the approval
/// to wait for, and, for a missing run token, the challenge and no reuse.
pub fn refusal_response(r: &Refusal) -> Response<ProxyBody> {
    let mut resp = Response::new(ProxyBody::text(r.body()));
    *resp.status_mut() = r.code.status();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(id) = r
        .approval_id
        .as_deref()
        .and_then(|id| HeaderValue::from_str(id).ok())
    {
        h.insert(super::refusal::APPROVAL_ID_HEADER, id);
    }
    if r.code == Code::ProxyAuthRequired {
        // A connection that failed to authenticate gets no second try on it:
        // a client holding idle connections with made-up tokens holds nothing.
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
        h.insert(
            header::PROXY_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"tessera\", Bearer realm=\"tessera\""),
        );
    }
    resp
}

/// Request headers that belong to the hop between client and proxy.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
];

/// Removes the hop-by-hop headers, and those `Connection` names, before a
/// request or response crosses the proxy.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect();
    for h in HOP_BY_HOP.iter().map(|s| s.to_string()).chain(named) {
        headers.remove(h.as_str());
    }
}
