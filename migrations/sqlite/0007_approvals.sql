-- Approvals: a human decision between a permit with @approval and the capability.
-- An approval is bound to one run, action, resource and the canonical (RFC 8785)
-- arguments; the capability it is redeemed for carries their hash (`args`) and
-- is recorded with the approval id, once (the unique index).

-- Approver keys: principals of their own, minted by an admin, stored hashed.
CREATE TABLE approvers (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    user_name  TEXT NOT NULL,
    key_hash   TEXT NOT NULL UNIQUE,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);

CREATE TABLE approvals (
    id            TEXT PRIMARY KEY,
    run_id        TEXT NOT NULL REFERENCES runs(id),
    action        TEXT NOT NULL,
    resource      TEXT NOT NULL,
    arguments     TEXT NOT NULL,
    args_hash     TEXT NOT NULL,
    policy        TEXT NOT NULL,
    approvers     TEXT NOT NULL,
    status        TEXT NOT NULL
        CHECK (status IN ('pending', 'approved', 'denied', 'expired', 'cancelled')),
    created_at    BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    decided_at    BIGINT,
    capability_id TEXT
);
CREATE INDEX approvals_run ON approvals(run_id);
CREATE INDEX approvals_open ON approvals(expires_at) WHERE status IN ('pending', 'approved');
CREATE UNIQUE INDEX approvals_capability ON approvals(capability_id)
    WHERE capability_id IS NOT NULL;

-- One decision per person (`voter`: `user:NAME`, or `admin`) and approval.
CREATE TABLE approval_decisions (
    approval_id TEXT NOT NULL REFERENCES approvals(id),
    voter       TEXT NOT NULL,
    approver    TEXT NOT NULL,
    user_name   TEXT,
    decision    TEXT NOT NULL CHECK (decision IN ('approve', 'deny')),
    comment     TEXT,
    decided_at  BIGINT NOT NULL,
    PRIMARY KEY (approval_id, voter)
);

-- Notifications, delivered by a worker from this outbox until the receiver
-- confirms (2xx); the body never holds a token.
CREATE TABLE webhook_outbox (
    id              TEXT PRIMARY KEY,
    approval_id     TEXT NOT NULL,
    event           TEXT NOT NULL,
    body            TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at BIGINT NOT NULL,
    delivered_at    BIGINT,
    last_error      TEXT
);
CREATE INDEX webhook_outbox_due ON webhook_outbox(next_attempt_at) WHERE delivered_at IS NULL;

-- What a capability was issued for: the arguments (canonical) and their hash,
-- and the approval redeemed for it.
ALTER TABLE capabilities ADD COLUMN arguments TEXT;
ALTER TABLE capabilities ADD COLUMN args_hash TEXT;
ALTER TABLE capabilities ADD COLUMN approval_id TEXT;
