//! The STS and IAM clients of one backend, and the broker's own credentials.
//!
//! STS goes through aws-smithy-http-client's hyper 1 + rustls with the *ring*
//! provider, IAM through the broker's reqwest on rustls with ring
//! ([`super::iam`]): one TLS stack, as in the rest of the broker (no aws-lc-rs,
//! no OpenSSL). Credentials come only from the source chosen at
//! start ([`CredentialSource`]); nothing here ever constructs the SDK's default
//! chain, so nothing can wander off to the instance-metadata address. A profile
//! that names `credential_source = Ec2InstanceMetadata` or `EcsContainer` gets a
//! provider that refuses, with a message saying why.
//!
//! Throttling is retried by the SDK's standard retry strategy: up to
//! [`MAX_ATTEMPTS`] attempts with exponential backoff and jitter from
//! [`INITIAL_BACKOFF`], capped at [`MAX_BACKOFF`].

use super::settings::{AwsStsConfig, CredentialSource};
use aws_config::provider_config::ProviderConfig;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region};
use aws_sdk_sts::config::{Credentials, SharedCredentialsProvider};
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use aws_smithy_http_client::Builder as HttpClientBuilder;
use secrecy::ExposeSecret;
use std::time::Duration;

pub const MAX_ATTEMPTS: u32 = 4;
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(200);
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// The clients of one backend.
pub struct Clients {
    pub sts: aws_sdk_sts::Client,
    pub iam: super::iam::IamClient,
}

/// Refuses to fetch credentials from the instance-metadata or container endpoints.
#[derive(Debug)]
struct Refused(&'static str);

impl aws_credential_types::provider::ProvideCredentials for Refused {
    fn provide_credentials<'a>(
        &'a self,
    ) -> aws_credential_types::provider::future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        aws_credential_types::provider::future::ProvideCredentials::ready(Err(
            aws_credential_types::provider::error::CredentialsError::not_loaded(format!(
                "credential_source = {} is not used by Tessera: it never reads the instance \
                 metadata or container credential endpoints; configure keys, a source_profile \
                 chain or credential_process",
                self.0
            )),
        ))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error("backend has no resolved AWS credential source")]
    NotResolved,
    #[error("AWS profile {profile:?} gave no credentials: {cause}")]
    Profile { profile: String, cause: String },
    #[error("cannot build the IAM client: {0}")]
    Iam(String),
}

/// Builds the clients and checks, once, that the credential source yields
/// credentials, so a broken source fails `tessera serve` instead of the first exchange.
pub async fn build(cfg: &AwsStsConfig) -> Result<Clients, CredentialsError> {
    let http = HttpClientBuilder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
        .build_https();
    let region = Region::new(cfg.region.clone());
    let credentials = match &cfg.credentials {
        CredentialSource::NotResolved => return Err(CredentialsError::NotResolved),
        CredentialSource::Environment(keys) => SharedCredentialsProvider::new(Credentials::new(
            keys.access_key_id.clone(),
            keys.secret_access_key.expose_secret().to_owned(),
            keys.session_token
                .as_ref()
                .map(|t| t.expose_secret().to_owned()),
            None,
            "tessera-environment",
        )),
        CredentialSource::Profile {
            name,
            credentials_file,
        } => {
            let provider_config = ProviderConfig::empty()
                .with_http_client(http.clone())
                .with_region(Some(region.clone()));
            let mut builder = aws_config::profile::ProfileFileCredentialsProvider::builder()
                .configure(&provider_config)
                .profile_name(name)
                .with_custom_provider("Ec2InstanceMetadata", Refused("Ec2InstanceMetadata"))
                .with_custom_provider("EcsContainer", Refused("EcsContainer"));
            if let Some(file) = credentials_file {
                #[allow(deprecated)] // the replacement lives in aws-runtime, not a dependency here
                let files = aws_config::profile::profile_file::ProfileFiles::builder()
                    .include_default_config_file(true)
                    .with_file(
                        aws_config::profile::profile_file::ProfileFileKind::Credentials,
                        file,
                    )
                    .build();
                builder = builder.profile_files(files);
            }
            let provider = builder.build();
            use aws_credential_types::provider::ProvideCredentials;
            provider
                .provide_credentials()
                .await
                .map_err(|e| CredentialsError::Profile {
                    profile: name.clone(),
                    cause: aws_smithy_types::error::display::DisplayErrorContext(&e).to_string(),
                })?;
            SharedCredentialsProvider::new(provider)
        }
    };
    let retry = RetryConfig::standard()
        .with_max_attempts(MAX_ATTEMPTS)
        .with_initial_backoff(INITIAL_BACKOFF)
        .with_max_backoff(MAX_BACKOFF);
    let timeouts = TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(3))
        .operation_attempt_timeout(Duration::from_secs(10))
        .operation_timeout(Duration::from_secs(30))
        .build();

    let mut sts = aws_sdk_sts::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(region.clone())
        .http_client(http.clone())
        .credentials_provider(credentials.clone())
        .retry_config(retry)
        .timeout_config(timeouts);
    if let Some(url) = &cfg.endpoint_url {
        sts = sts.endpoint_url(url);
    }
    let iam = super::iam::IamClient::new(
        &cfg.role_arn,
        cfg.endpoint_url.as_deref(),
        &cfg.region,
        credentials,
    )
    .map_err(CredentialsError::Iam)?;
    Ok(Clients {
        sts: aws_sdk_sts::Client::from_conf(sts.build()),
        iam,
    })
}
