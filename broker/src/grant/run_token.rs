//! Who is asking, at every door a run comes through: its run token (in
//! `Authorization`, an OAuth `subject_token` or the gateway's
//! `Proxy-Authorization`) names its run. It is parsed as a
//! [`RunToken`] (its shape checked) before it is hashed, and only the SHA-256
//! is looked up (cached in memory).

use crate::app::App;
use crate::secret::RunToken;
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
    let hash = RunToken::sha256_of_presented(token).map_err(|_| RunTokenError::Invalid)?;
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
