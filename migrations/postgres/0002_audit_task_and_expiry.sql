-- Audit rows name the task of the run they concern (issue 3). Rows written before
-- this column existed hash without it: the canonical form omits a null task_id.
ALTER TABLE audit ADD COLUMN task_id TEXT;

-- The expiry sweeper looks for runs that are past their expiry and not yet ended;
-- a partial index keeps that lookup off the ended runs.
CREATE INDEX runs_open_by_expiry ON runs (expires_at) WHERE ended_at IS NULL;
