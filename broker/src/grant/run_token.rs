//! Who is asking, at every door a run comes through: its run token (in
//! `Authorization`, an OAuth `subject_token` or the gateway's
//! `Proxy-Authorization`) names its run. The shape is checked before the
//! token is hashed, and only the SHA-256 is looked up (cached in memory).

use crate::app::App;
use crate::ids::{has_secret_shape, sha256_hex, RUN_TOKEN_PREFIX};
use crate::store::runs::{self, RunRecord};
use crate::store::StoreError;
use std::sync::Arc;

#[derive(Debug)]
pub enum RunTokenError {
    /// Not a run token, or not a known one (which part is not said).
    Invalid,
    Store(StoreError),
}

/// The run `token` names.
pub async fn run_from(app: &App, token: &str) -> Result<Arc<RunRecord>, RunTokenError> {
    if !has_secret_shape(token, RUN_TOKEN_PREFIX) {
        return Err(RunTokenError::Invalid);
    }
    let hash = sha256_hex(token.as_bytes());
    if let Some(run) = app.runs.get(&hash) {
        return Ok(run);
    }
    let run = Arc::new(
        runs::find_by_token_hash(&app.store, &hash)
            .await
            .map_err(RunTokenError::Store)?
            .ok_or(RunTokenError::Invalid)?,
    );
    app.runs.insert(hash, run.clone());
    Ok(run)
}
