//! Taking the tool's credentials off a request and putting the rule's on.
//!
//! Stripped from every intercepted request, whatever the rule: `Authorization`,
//! `Proxy-Authorization`, the rule's own header, a SigV4 rule's signing headers
//! (`X-Amz-Security-Token`, `X-Amz-Date`, `X-Amz-Content-Sha256`), and any
//! header that carries a placeholder. The tool's other `X-Amz-*` headers (an
//! object's metadata, its ACL) are kept and signed with the request. Then the rule's
//! credential is added: a static header, a JWT minted for this one request, or
//! a SigV4 signature over the request as it will be sent. The credential is
//! never logged, audited or shown to the tool: it exists in the outgoing
//! request and in the rule's memory only.

use crate::backends::http::{Auth, HttpConfig};
use crate::backends::token::{AccessTokenClaims, Actor, ACCESS_TOKEN_TYP};
use crate::config::BackendConfig;
use crate::gateway::refusal::{Code, Refusal};
use crate::gateway::Gateway;
use crate::injection::sessions::{placeholders_in, AwsSession, RunSession};
use crate::store::runs::RunRecord;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use secrecy::ExposeSecret;

/// The headers a SigV4 signature consists of: the tool's are never kept.
pub const SIGV4_OWN: [&str; 3] = ["x-amz-security-token", "x-amz-date", "x-amz-content-sha256"];

/// `x-amz-*` headers a tool may add to a signed request without policy seeing
/// them: they describe the object written (its metadata, checksum, storage and
/// encryption), not what the request does or where its data comes from. Any
/// other (`x-amz-copy-source`, `x-amz-acl`, `x-amz-grant-*`,
/// `x-amz-website-redirect-location`, …) is refused unless the rule shows it to
/// policy (`policy_headers`).
pub fn is_descriptive_amz(name: &str) -> bool {
    name.starts_with("x-amz-meta-")
        || name.starts_with("x-amz-checksum-")
        || matches!(
            name,
            "x-amz-sdk-checksum-algorithm"
                | "x-amz-storage-class"
                | "x-amz-server-side-encryption"
                | "x-amz-expected-bucket-owner"
                | "x-amz-decoded-content-length"
                | "x-amz-trailer"
                | "x-amz-user-agent"
        )
}

/// Longest life of a JWT minted for one request.
const TOKEN_SECS: i64 = 60;
/// AWS credentials are renewed this long before they expire.
const AWS_RENEW_SECS: i64 = 120;

/// Removes whatever credential the tool sent.
pub fn strip(headers: &mut HeaderMap, rule: &HttpConfig) {
    let mut names: Vec<HeaderName> = vec![
        hyper::header::AUTHORIZATION,
        hyper::header::PROXY_AUTHORIZATION,
    ];
    if let Auth::Header { name, .. } = &rule.auth {
        if let Ok(n) = HeaderName::from_bytes(name.as_bytes()) {
            names.push(n);
        }
    }
    for (name, value) in headers.iter() {
        let sigv4 = matches!(rule.auth, Auth::SigV4 { .. }) && SIGV4_OWN.contains(&name.as_str());
        let carries = placeholders_in(&String::from_utf8_lossy(value.as_bytes()))
            .next()
            .is_some();
        if sigv4 || carries {
            names.push(name.clone());
        }
    }
    for n in names {
        headers.remove(n);
    }
}

fn unavailable(why: impl Into<String>) -> Refusal {
    Refusal::new(Code::UpstreamUnavailable, why)
}

/// What an injected request is, for the credential: its method, its URL as it
/// is sent (`https://authority/target`), and its body when the rule signs it.
pub struct Outgoing<'a> {
    pub method: &'a str,
    pub url: &'a str,
    pub decided_path: &'a str,
    pub body: Option<&'a [u8]>,
}

/// Adds the rule's credential to `headers`.
pub async fn inject(
    gw: &Gateway,
    session: &RunSession,
    run: &RunRecord,
    rule: &HttpConfig,
    out: Outgoing<'_>,
    headers: &mut HeaderMap,
) -> Result<(), Refusal> {
    match &rule.auth {
        Auth::None => Ok(()),
        Auth::Header {
            name,
            prefix,
            secret,
            ..
        } => {
            let secret = secret
                .as_ref()
                .ok_or_else(|| unavailable("the rule's secret is not loaded"))?;
            let mut value = HeaderValue::from_str(&format!("{prefix}{}", secret.expose_secret()))
                .map_err(|_| unavailable("the rule's secret is not a header value"))?;
            value.set_sensitive(true);
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| unavailable("the rule's header name"))?;
            headers.insert(name, value);
            Ok(())
        }
        Auth::Token { backend } => {
            let Some(BackendConfig::Token(token)) = gw.app.config.backends.get(backend) else {
                return Err(unavailable("the rule's token backend is not configured"));
            };
            let now = gw.app.clock.now();
            let id = crate::ids::new_id();
            let claims = AccessTokenClaims {
                iss: gw.app.config.issuer.clone(),
                aud: token.audience.clone(),
                sub: run.user.clone(),
                jti: id.clone().into(),
                iat: now,
                nbf: now,
                exp: (now + TOKEN_SECS).min(run.expires_at),
                client_id: format!("tessera-run:{}", run.id),
                scope: out.method.to_owned(),
                resource: out.decided_path.to_owned(),
                act: Actor {
                    sub: format!("run:{}", run.id),
                },
                cap: id.into(),
                args: None,
            };
            let keys = gw.app.keys.snapshot();
            let jwt = crate::keys::jwt::encode(keys.signer(now), ACCESS_TOKEN_TYP, &claims);
            let mut value = HeaderValue::from_str(&format!("Bearer {jwt}"))
                .map_err(|_| unavailable("the minted token"))?;
            value.set_sensitive(true);
            headers.insert(hyper::header::AUTHORIZATION, value);
            Ok(())
        }
        Auth::SigV4 { backend, service } => {
            let aws = aws_session(gw, session, run, backend).await?;
            sign(gw, &aws, backend, service, out, headers)
        }
    }
}

/// The run's credentials for `backend`, assumed on first use and renewed
/// before they expire.
async fn aws_session(
    gw: &Gateway,
    session: &RunSession,
    run: &RunRecord,
    backend: &str,
) -> Result<AwsSession, Refusal> {
    let now = gw.app.clock.now();
    let mut held = session.aws.lock().await;
    if let Some(s) = held
        .get(backend)
        .filter(|s| s.expires_at - AWS_RENEW_SECS > now)
    {
        return Ok(s.clone());
    }
    let sts = gw
        .aws
        .get(backend)
        .ok_or_else(|| unavailable("the rule's aws-sts backend is not configured"))?;
    let (credentials, expires_at) = sts
        .gateway_session(&run.user, &run.id, &run.task_id, run.expires_at)
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, backend, "cannot assume the role for SigV4 injection");
            unavailable("the AWS credentials for this API cannot be obtained")
        })?;
    let s = AwsSession {
        credentials,
        expires_at,
    };
    held.insert(backend.to_owned(), s.clone());
    Ok(s)
}

fn sign(
    gw: &Gateway,
    aws: &AwsSession,
    backend: &str,
    service: &str,
    out: Outgoing<'_>,
    headers: &mut HeaderMap,
) -> Result<(), Refusal> {
    use aws_sigv4::http_request::{
        sign, PayloadChecksumKind, SignableBody, SignableRequest, SigningSettings,
    };
    use aws_sigv4::sign::v4;
    let region = gw
        .aws
        .get(backend)
        .map(|b| b.region().to_owned())
        .unwrap_or_default();
    let identity = aws.credentials.clone().into();
    let mut settings = SigningSettings::default();
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    if service == "s3" {
        // S3 signs the path as sent: encoded once, never normalised.
        settings.percent_encoding_mode = aws_sigv4::http_request::PercentEncodingMode::Single;
        settings.uri_path_normalization_mode =
            aws_sigv4::http_request::UriPathNormalizationMode::Disabled;
    }
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(&region)
        .name(service)
        .time(
            std::time::UNIX_EPOCH
                + std::time::Duration::from_secs(gw.app.clock.now().max(0) as u64),
        )
        .settings(settings)
        .build()
        .map_err(|_| unavailable("SigV4 parameters"))?
        .into();
    // S3 requires every x-amz-* header of a request to be signed.
    let amz: Vec<(String, String)> = headers
        .iter()
        .filter(|(n, _)| n.as_str().starts_with("x-amz-"))
        .filter_map(|(n, v)| Some((n.as_str().to_owned(), v.to_str().ok()?.to_owned())))
        .collect();
    let signable = SignableRequest::new(
        out.method,
        out.url,
        amz.iter().map(|(n, v)| (n.as_str(), v.as_str())),
        SignableBody::Bytes(out.body.unwrap_or_default()),
    )
    .map_err(|_| unavailable("the request cannot be signed"))?;
    let (instructions, _) = sign(signable, &params)
        .map_err(|_| unavailable("the request cannot be signed"))?
        .into_parts();
    for (name, value) in instructions.headers() {
        let mut v = HeaderValue::from_str(value).map_err(|_| unavailable("a signed header"))?;
        v.set_sensitive(true);
        let n =
            HeaderName::from_bytes(name.as_bytes()).map_err(|_| unavailable("a signed header"))?;
        headers.insert(n, v);
    }
    Ok(())
}
