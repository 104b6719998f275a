//! Wire types of Tessera as an OAuth 2 authorization server (re-exported by
//! [`crate::types`]): RFC 8414 metadata, the RFC 8693 token exchange, RFC 9068
//! access tokens, RFC 7662 introspection and RFC 6749 errors.

use serde::{Deserialize, Serialize};

/// `grant_type` of an RFC 8693 token exchange.
pub const GRANT_TYPE_TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// `subject_token_type` of a Tessera run token.
pub const RUN_TOKEN_TYPE: &str = "urn:tessera:params:oauth:token-type:run_token";
/// `issued_token_type` (and accepted `requested_token_type`): an access token.
pub const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";

/// `GET /.well-known/oauth-authorization-server` (RFC 8414).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuthorizationServerMetadata {
    /// The broker's public URL (`[oauth] issuer`): access tokens' `iss`.
    pub issuer: String,
    pub token_endpoint: String,
    pub jwks_uri: String,
    pub introspection_endpoint: String,
    pub grant_types_supported: Vec<String>,
    /// Empty: there is no authorization endpoint (runs are started by runtimes).
    pub response_types_supported: Vec<String>,
    pub token_endpoint_auth_methods_supported: Vec<String>,
    pub introspection_endpoint_auth_methods_supported: Vec<String>,
    pub dpop_signing_alg_values_supported: Vec<String>,
    /// Every scope of every `oauth-resource` backend.
    pub scopes_supported: Vec<String>,
    /// Tessera's run token type URI: the only `subject_token_type`.
    pub tessera_subject_token_types_supported: Vec<String>,
}

/// `POST /oauth/token`, form-encoded (RFC 8693 §2.1).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TokenExchangeRequest {
    /// `urn:ietf:params:oauth:grant-type:token-exchange`.
    pub grant_type: String,
    /// The run token.
    pub subject_token: String,
    /// `urn:tessera:params:oauth:token-type:run_token`.
    pub subject_token_type: String,
    /// The protected resource's URL (RFC 8707), exactly as registered.
    pub resource: String,
    /// One scope: the action the token carries.
    pub scope: String,
    /// `urn:ietf:params:oauth:token-type:access_token` if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_token_type: Option<String>,
    /// Tessera extension: an approved approval to redeem for this token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
}

impl std::fmt::Debug for TokenExchangeRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenExchangeRequest")
            .field("grant_type", &self.grant_type)
            .field("subject_token", &"[redacted]")
            .field("resource", &self.resource)
            .field("scope", &self.scope)
            .field("approval_id", &self.approval_id)
            .finish()
    }
}

/// A successful token exchange (RFC 8693 §2.2.1).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TokenExchangeResponse {
    /// The access token (a JWT, `typ` `at+jwt`).
    pub access_token: String,
    pub issued_token_type: String,
    /// `Bearer`, or `DPoP` when bound to the proof's key.
    pub token_type: String,
    /// Seconds until it expires.
    pub expires_in: i64,
    pub scope: String,
}

impl std::fmt::Debug for TokenExchangeResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenExchangeResponse")
            .field("access_token", &"[redacted]")
            .field("token_type", &self.token_type)
            .field("expires_in", &self.expires_in)
            .field("scope", &self.scope)
            .finish()
    }
}

/// An OAuth error (RFC 6749 §5.2), with Tessera's stable code and request id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OAuthError {
    /// `invalid_request`, `invalid_client`, `invalid_grant`, `unsupported_grant_type`,
    /// `invalid_scope`, `invalid_target`, `authorization_pending`, `invalid_dpop_proof`,
    /// `use_dpop_nonce`, `slow_down`, `temporarily_unavailable`, `server_error`.
    pub error: String,
    pub error_description: String,
    /// Tessera's stable error code (docs/api.md).
    pub code: String,
    pub request_id: String,
    /// With `authorization_pending`: the approval to wait for, then to redeem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
}

/// `cnf` (RFC 7800): the key a token is bound to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Confirmation {
    /// RFC 7638 SHA-256 thumbprint of the DPoP key.
    pub jkt: String,
}

/// The claims of an access token from `POST /oauth/token` (RFC 9068 profile).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct OAuthAccessTokenClaims {
    /// The OAuth issuer (`[oauth] issuer`).
    pub iss: String,
    /// The protected resource's URL.
    pub aud: String,
    /// The user.
    pub sub: String,
    /// The token's id (its record's, as a capability's).
    pub jti: String,
    pub iat: i64,
    pub nbf: i64,
    pub exp: i64,
    /// The one scope.
    pub scope: String,
    /// `tessera-runtime:<runtime id>`: the client the run belongs to.
    pub client_id: String,
    /// The actor: `run:<run id>` acting for `sub` (RFC 8693 §4.1).
    pub act: crate::types::Actor,
    /// The run id.
    pub run: String,
    /// The task id.
    pub task: String,
    /// The DPoP key it is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cnf: Option<Confirmation>,
}

/// `POST /oauth/introspect` (RFC 7662): `{"active": false}`, or a live
/// token's claims.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
#[allow(clippy::large_enum_variant)] // A wire type, built once per answer.
pub enum OAuthIntrospection {
    Active(OAuthActiveToken),
    Inactive(crate::types::InactiveIntrospection),
}

/// A live access token for the asking resource server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OAuthActiveToken {
    pub active: bool,
    /// `Bearer` or `DPoP`.
    pub token_type: String,
    #[serde(flatten)]
    pub claims: OAuthAccessTokenClaims,
}
