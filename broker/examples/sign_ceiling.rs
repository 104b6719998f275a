//! Benchmark ceiling: a bare axum endpoint that parses the capability request and
//! signs an Ed25519 JWT with the same claims and the same signer as the broker —
//! no auth, no policy, no store. `bench/issue.sh` measures it beside the broker.

use axum::routing::post;
use axum::{Json, Router};
use std::sync::Arc;
use tessera_broker::capability::{CapabilityClaims, CAPABILITY_TYP};
use tessera_broker::keys::{jwt, SigningKey};
use tessera_client::types::CapabilityRequest;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8799".to_owned());
    let key = Arc::new(SigningKey::generate().0);
    let app = Router::new().route(
        "/v1/capabilities",
        post(move |Json(req): Json<CapabilityRequest>| {
            let key = key.clone();
            async move {
                let now = tessera_broker::clock::Clock::new().now();
                let claims = CapabilityClaims {
                    iss: "tessera".into(),
                    aud: "tessera/capabilities".into(),
                    sub: "alice".into(),
                    jti: tessera_broker::ids::new_id().into(),
                    iat: now,
                    nbf: now,
                    exp: now + 900,
                    run: tessera_broker::ids::new_id().into(),
                    task: "t-1".into(),
                    rt: tessera_broker::ids::new_id().into(),
                    act: req.action,
                    res: req.resource,
                    uses: 20,
                    cnf: None,
                    args: None,
                };
                let token = jwt::encode(&key, CAPABILITY_TYP, &claims);
                (
                    axum::http::StatusCode::CREATED,
                    Json(serde_json::json!({ "token": token })),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    axum::serve(listener, app).await
}
