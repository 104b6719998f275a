-- Revocation claims belong to a live broker process (issue 12). A claim names
-- its instance and lapses at claim_until unless the instance's heartbeat renews
-- it; a stopping instance releases its claims, and a dead one's are taken over
-- by the next start (see broker/src/instance.rs). next_attempt_at is now only
-- the retry schedule, no longer pushed forward to mark a claim.
ALTER TABLE revocations ADD COLUMN claimed_by TEXT;
ALTER TABLE revocations ADD COLUMN claim_until BIGINT;
CREATE INDEX revocations_claimed ON revocations (claimed_by) WHERE claimed_by IS NOT NULL AND done_at IS NULL;

CREATE TABLE broker_instances (
    id           TEXT PRIMARY KEY,
    machine      TEXT NOT NULL,
    pid          BIGINT NOT NULL,
    pid_start    TEXT NOT NULL,
    started_at   BIGINT NOT NULL,
    heartbeat_at BIGINT NOT NULL,
    stopped_at   BIGINT
);
