//! An S3 read with credentials scoped to one object prefix, fetched through
//! Tessera and refreshed before they expire.
//!
//! With the AWS SDK the provider is one line:
//! `aws_config::from_env().credentials_provider(creds).load().await`. To stay
//! light this example signs the one GetObject itself (SigV4), which is what the
//! SDK would do with the same credentials.
//!
//! ```sh
//! TESSERA_ADDR=http://127.0.0.1:8700 TESSERA_RUN_TOKEN_FILE=./run.token \
//!   cargo run -p tessera-client --features aws --example s3_read -- \
//!   aws-prod:arn:aws:s3:::reports/2026/* https://reports.s3.amazonaws.com/2026/q1.csv us-east-1
//! ```

use aws_credential_types::provider::ProvideCredentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use std::time::SystemTime;
use tessera_client::aws::TesseraCredentials;
use tessera_client::Client;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(resource), Some(url)) = (args.next(), args.next()) else {
        eprintln!("usage: s3_read BACKEND:ARN OBJECT_URL [REGION]");
        std::process::exit(2);
    };
    let region = args.next().unwrap_or_else(|| "us-east-1".into());

    let provider = TesseraCredentials::new(Client::from_env()?, "s3:GetObject", &resource);
    let creds = provider.provide_credentials().await?;
    println!(
        "scoped credentials {} until {:?}",
        creds.access_key_id(),
        creds.expiry()
    );

    let identity = creds.into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(&region)
        .name("s3")
        .time(SystemTime::now())
        .settings(SigningSettings::default())
        .build()?
        .into();
    let signable = SignableRequest::new("GET", &url, std::iter::empty(), SignableBody::Bytes(&[]))?;
    let (instructions, _) = sign(signable, &params)?.into_parts();
    let mut req = reqwest::Client::new().get(&url);
    for (name, value) in instructions.headers() {
        req = req.header(name, value);
    }
    let resp = req.send().await?;
    println!("GET {url}: {}", resp.status());
    Ok(())
}
