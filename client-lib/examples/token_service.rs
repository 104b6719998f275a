//! A capability for an internal service that verifies Tessera tokens itself:
//! ask, exchange for an audience-restricted access token, use it, revoke.
//!
//! ```sh
//! TESSERA_ADDR=http://127.0.0.1:8700 TESSERA_RUN_TOKEN_FILE=./run.token \
//!   cargo run -p tessera-client --example token_service -- read svc-reports:reports/2026/q1.csv
//! ```

use tessera_client::{Client, Error};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let action = args.next().unwrap_or_else(|| "read".into());
    let resource = args
        .next()
        .unwrap_or_else(|| "svc-reports:reports/2026/q1.csv".into());

    let tessera = Client::from_env()?;
    let cap = tessera.capability(&action, &resource).await?;
    println!(
        "capability {} until {} ({} uses)",
        cap.id(),
        cap.expires_at,
        cap.uses
    );
    let access = tessera.exchange(&cap).await?;
    let audience = access
        .field("audience")
        .and_then(|v| v.as_str())
        .unwrap_or("?");
    println!("access token for {audience}, lease {}", access.lease_id);
    // ... send `access.field("token")` as a Bearer token to the service ...
    tessera.revoke(&cap).await?;
    println!("revoked");
    Ok(())
}
