//! The three IAM calls `deny_revoked_runs` needs — GetRolePolicy, PutRolePolicy,
//! DeleteRolePolicy — signed with the SDK's own SigV4 signer (`aws-sigv4`) and
//! sent with the broker's reqwest + rustls(ring) client.
//!
//! Why not `aws-sdk-iam`: it alone costs ~140 s of compile CPU (3.5 min wall on
//! a 2-core machine) for ~160 operations of which Tessera uses three — as much as
//! every other AWS crate together (docs/backends/aws.md, "Build notes"). The IAM Query API is a form POST answered by small
//! XML documents, and the signer, the XML reader (`aws-smithy-xml`) and the
//! credentials provider are the SDK's, already compiled for STS. Throttling and
//! outages need no retry loop here: the revocation outbox retries with backoff.

use super::policy_doc::PolicyDocument;
use super::BackendError;
use aws_credential_types::provider::ProvideCredentials;
use aws_sdk_sts::config::SharedCredentialsProvider;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use std::time::SystemTime;

/// RFC 3986 unreserved characters stay, everything else is encoded (as AWS does).
const QUERY: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

pub struct IamClient {
    http: reqwest::Client,
    endpoint: String,
    /// The region IAM requests are signed for (IAM is global per partition).
    signing_region: String,
    credentials: SharedCredentialsProvider,
}

/// IAM's endpoint and signing region for the role's partition.
fn default_endpoint(partition: &str) -> (&'static str, &'static str) {
    match partition {
        "aws-cn" => ("https://iam.cn-north-1.amazonaws.com.cn", "cn-north-1"),
        "aws-us-gov" => ("https://iam.us-gov.amazonaws.com", "us-gov-west-1"),
        _ => ("https://iam.amazonaws.com", "us-east-1"),
    }
}

impl IamClient {
    pub fn new(
        role_arn: &str,
        endpoint_url: Option<&str>,
        region: &str,
        credentials: SharedCredentialsProvider,
    ) -> Result<IamClient, String> {
        let partition = role_arn.split(':').nth(1).unwrap_or("aws");
        let (endpoint, signing_region) = match endpoint_url {
            Some(url) => (url.trim_end_matches('/').to_owned(), region.to_owned()),
            None => {
                let (e, r) = default_endpoint(partition);
                (e.to_owned(), r.to_owned())
            }
        };
        Ok(IamClient {
            http: crate::http_client::system_roots()?,
            endpoint,
            signing_region,
            credentials,
        })
    }

    /// The inline policy `policy` of `role`; `None` when it does not exist.
    pub async fn get_role_policy(
        &self,
        role: &str,
        policy: &str,
    ) -> Result<Option<String>, BackendError> {
        let params = [
            ("Action", "GetRolePolicy"),
            ("RoleName", role),
            ("PolicyName", policy),
        ];
        match self.call("GetRolePolicy", &params).await? {
            Ok(body) => element_text(&body, "PolicyDocument")
                .map(Some)
                .ok_or_else(|| {
                    BackendError::Unavailable(
                        "GetRolePolicy: no PolicyDocument in the response".into(),
                    )
                }),
            Err((code, _)) if code == "NoSuchEntity" => Ok(None),
            Err((code, message)) => Err(super::classify_code("GetRolePolicy", &code, &message)),
        }
    }

    pub async fn put_role_policy(
        &self,
        role: &str,
        policy: &str,
        doc: &PolicyDocument,
    ) -> Result<(), BackendError> {
        let json = doc.to_json();
        let params = [
            ("Action", "PutRolePolicy"),
            ("RoleName", role),
            ("PolicyName", policy),
            ("PolicyDocument", json.as_str()),
        ];
        match self.call("PutRolePolicy", &params).await? {
            Ok(_) => Ok(()),
            Err((code, message)) => Err(super::classify_code("PutRolePolicy", &code, &message)),
        }
    }

    /// Deletes the inline policy; one that does not exist is success.
    pub async fn delete_role_policy(&self, role: &str, policy: &str) -> Result<(), BackendError> {
        let params = [
            ("Action", "DeleteRolePolicy"),
            ("RoleName", role),
            ("PolicyName", policy),
        ];
        match self.call("DeleteRolePolicy", &params).await? {
            Ok(_) => Ok(()),
            Err((code, _)) if code == "NoSuchEntity" => Ok(()),
            Err((code, message)) => Err(super::classify_code("DeleteRolePolicy", &code, &message)),
        }
    }

    /// One signed Query API call: the body on success, (code, message) on an AWS error.
    async fn call(
        &self,
        op: &str,
        params: &[(&str, &str)],
    ) -> Result<Result<String, (String, String)>, BackendError> {
        let mut body = String::from("Version=2010-05-08");
        for (k, v) in params {
            body.push('&');
            body.push_str(k);
            body.push('=');
            body.extend(utf8_percent_encode(v, QUERY));
        }
        let creds = self.credentials.provide_credentials().await.map_err(|e| {
            BackendError::Refused(format!(
                "{op}: the broker's AWS credentials are unavailable: {e}"
            ))
        })?;
        let identity = creds.into();
        let signing = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.signing_region)
            .name("iam")
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| BackendError::Unavailable(format!("{op}: signing: {e}")))?
            .into();
        let url = format!("{}/", self.endpoint);
        let content_type = "application/x-www-form-urlencoded; charset=utf-8";
        let headers = [("content-type", content_type)];
        let signable = SignableRequest::new(
            "POST",
            url.as_str(),
            headers.into_iter(),
            SignableBody::Bytes(body.as_bytes()),
        )
        .map_err(|e| BackendError::Unavailable(format!("{op}: signing: {e}")))?;
        let (instructions, _) = sign(signable, &signing)
            .map_err(|e| BackendError::Unavailable(format!("{op}: signing: {e}")))?
            .into_parts();
        let mut req = self.http.post(&url).header("content-type", content_type);
        for (name, value) in instructions.headers() {
            req = req.header(name, value);
        }
        let resp = req
            .body(body)
            .send()
            .await
            .map_err(|e| BackendError::Unavailable(format!("{op}: cannot reach IAM: {e}")))?;
        let status = resp.status();
        let text = resp
            .text()
            .await
            .map_err(|e| BackendError::Unavailable(format!("{op}: reading the response: {e}")))?;
        if status.is_success() {
            return Ok(Ok(text));
        }
        match element_text(&text, "Code") {
            Some(code) => {
                let message: String = element_text(&text, "Message")
                    .unwrap_or_default()
                    .chars()
                    .take(300)
                    .collect();
                Ok(Err((code, message)))
            }
            None if status.is_server_error() => {
                Err(BackendError::Unavailable(format!("{op}: HTTP {status}")))
            }
            None => Err(BackendError::Refused(format!("{op}: HTTP {status}"))),
        }
    }
}

/// The unescaped text of the first element named `name` anywhere in `xml`.
pub fn element_text(xml: &str, name: &str) -> Option<String> {
    let mut doc = aws_smithy_xml::decode::Document::new(xml);
    let mut root = doc.root_element().ok()?;
    find(&mut root, name)
}

fn find(el: &mut aws_smithy_xml::decode::ScopedDecoder<'_, '_>, name: &str) -> Option<String> {
    while let Some(mut child) = el.next_tag() {
        if child.start_el().local() == name {
            return aws_smithy_xml::decode::try_data(&mut child)
                .ok()
                .map(|d| d.into_owned());
        }
        if let Some(found) = find(&mut child, name) {
            return Some(found);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_iam_responses() {
        let ok = r#"<GetRolePolicyResponse xmlns="https://iam.amazonaws.com/doc/2010-05-08/">
  <GetRolePolicyResult><RoleName>r</RoleName><PolicyName>p</PolicyName>
  <PolicyDocument>%7B%22Version%22%3A%222012-10-17%22%7D</PolicyDocument></GetRolePolicyResult>
  <ResponseMetadata><RequestId>1</RequestId></ResponseMetadata></GetRolePolicyResponse>"#;
        assert_eq!(
            element_text(ok, "PolicyDocument").as_deref(),
            Some("%7B%22Version%22%3A%222012-10-17%22%7D")
        );
        let err = r#"<ErrorResponse><Error><Type>Sender</Type><Code>NoSuchEntity</Code>
  <Message>The role policy with name p cannot be found &amp; so on.</Message></Error></ErrorResponse>"#;
        assert_eq!(element_text(err, "Code").as_deref(), Some("NoSuchEntity"));
        assert_eq!(
            element_text(err, "Message").as_deref(),
            Some("The role policy with name p cannot be found & so on.")
        );
        assert_eq!(element_text("not xml", "Code"), None);
    }

    #[test]
    fn endpoints_follow_the_partition() {
        let creds = SharedCredentialsProvider::new(aws_sdk_sts::config::Credentials::new(
            "a", "b", None, None, "t",
        ));
        let c = IamClient::new(
            "arn:aws-cn:iam::123456789012:role/x",
            None,
            "cn-northwest-1",
            creds.clone(),
        )
        .unwrap();
        assert_eq!(
            (c.endpoint.as_str(), c.signing_region.as_str()),
            ("https://iam.cn-north-1.amazonaws.com.cn", "cn-north-1")
        );
        let c = IamClient::new(
            "arn:aws:iam::123456789012:role/x",
            Some("http://127.0.0.1:5000/"),
            "eu-west-1",
            creds,
        )
        .unwrap();
        assert_eq!(
            (c.endpoint.as_str(), c.signing_region.as_str()),
            ("http://127.0.0.1:5000", "eu-west-1")
        );
    }
}
