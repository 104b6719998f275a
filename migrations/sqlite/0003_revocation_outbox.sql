-- Downstream revocation (issue 4). A backend that creates something downstream
-- (a database user) names it before the lease is recorded: leases.downstream_ref.
ALTER TABLE leases ADD COLUMN downstream_ref TEXT;

-- The revocation outbox: one row per lease whose downstream object must go,
-- written in the same transaction that revokes the lease (run end, capability
-- revoke, expiry, failed issue). A worker retries each until the backend confirms,
-- with backoff; the rows survive restarts. done_at marks completion.
CREATE TABLE revocations (
    lease_id        TEXT PRIMARY KEY REFERENCES leases(id),
    backend         TEXT NOT NULL,
    downstream_ref  TEXT NOT NULL,
    run_id          TEXT NOT NULL,
    reason          TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at BIGINT NOT NULL,
    last_error      TEXT,
    done_at         BIGINT
);
CREATE INDEX revocations_due ON revocations (next_attempt_at) WHERE done_at IS NULL;

-- The lease reaper looks for live leases past their expiry.
CREATE INDEX leases_live_by_expiry ON leases (expires_at)
    WHERE revoked_at IS NULL AND downstream_ref IS NOT NULL;
