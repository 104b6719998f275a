//! A PostgreSQL query as a throw-away user that can read exactly one table.
//!
//! The user exists only for this capability: revoking it (or the run's end, or
//! the capability's expiry) drops the user and cuts its sessions. The example
//! prints the libpq environment rather than connecting, so it needs no driver;
//! `psql` run with that environment works as is:
//!
//! ```sh
//! TESSERA_ADDR=http://127.0.0.1:8700 TESSERA_RUN_TOKEN_FILE=./run.token \
//!   cargo run -p tessera-client --example postgres_query -- select pg-main:analytics.public.orders
//! # or, with no code at all:
//! tessera exec --db select=pg-main:analytics.public.orders -- psql -c 'select count(*) from public.orders'
//! ```

use tessera_client::{Client, Error};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let action = args.next().unwrap_or_else(|| "select".into());
    let resource = args
        .next()
        .unwrap_or_else(|| "pg-main:analytics.public.orders".into());

    let tessera = Client::from_env()?;
    let db = tessera.database(&action, &resource).await?;
    println!("{db:?}"); // no password in Debug output
    let status = std::process::Command::new("psql")
        .arg("-c")
        .arg("select 1")
        .env_clear()
        .envs(db.environment())
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .status();
    match status {
        Ok(s) => println!("psql exited with {s}"),
        Err(e) => println!("psql not available ({e}); connect with the DSN from db.dsn()"),
    }
    tessera.revoke(&db.capability).await?;
    Ok(())
}
