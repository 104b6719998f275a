-- Tessera core schema (PostgreSQL). Append-only: never edit an applied migration.
-- Times are Unix seconds (BIGINT) unless the column says _ms. Booleans are
-- expressed as nullable timestamps (revoked_at, ended_at) so both dialects agree.

-- Runtimes: agent orchestrators. Only the SHA-256 of their API key is kept.
CREATE TABLE runtimes (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    key_hash    TEXT NOT NULL UNIQUE,
    users       TEXT NOT NULL,
    task_kinds  TEXT NOT NULL,
    -- SHA-256 (hex) of the DER client certificate the runtime is pinned to, if any.
    client_cert_sha256 TEXT,
    created_at  BIGINT NOT NULL,
    disabled_at BIGINT
);

-- Runs: one agent execution. The run token is stored only as SHA-256.
CREATE TABLE runs (
    id              TEXT PRIMARY KEY,
    token_hash      TEXT NOT NULL UNIQUE,
    runtime_id      TEXT NOT NULL REFERENCES runtimes(id),
    runtime_name    TEXT NOT NULL,
    user_name       TEXT NOT NULL,
    task_id         TEXT NOT NULL,
    task_kind       TEXT NOT NULL,
    task_attributes TEXT NOT NULL,
    labels          TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    expires_at      BIGINT NOT NULL,
    ended_at        BIGINT,
    end_reason      TEXT
);
CREATE INDEX runs_runtime ON runs(runtime_id);

-- Capabilities: every issued JWT, recorded before it is returned. The token
-- itself is never stored; `id` is its jti.
CREATE TABLE capabilities (
    id            TEXT PRIMARY KEY,
    run_id        TEXT NOT NULL REFERENCES runs(id),
    kid           TEXT NOT NULL,
    action        TEXT NOT NULL,
    resource      TEXT NOT NULL,
    backend       TEXT NOT NULL,
    policies      TEXT NOT NULL,
    issued_at     BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    uses          INTEGER NOT NULL,
    uses_left     INTEGER NOT NULL CHECK (uses_left >= 0 AND uses_left <= uses),
    revoked_at    BIGINT,
    revoke_reason TEXT
);
CREATE INDEX capabilities_run ON capabilities(run_id);

-- Leases: downstream credentials minted by an exchange.
CREATE TABLE leases (
    id            TEXT PRIMARY KEY,
    capability_id TEXT NOT NULL REFERENCES capabilities(id),
    run_id        TEXT NOT NULL REFERENCES runs(id),
    backend       TEXT NOT NULL,
    kind          TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    revoked_at    BIGINT
);
CREATE INDEX leases_run ON leases(run_id);
CREATE INDEX leases_capability ON leases(capability_id);

-- Signing keys: private halves sealed under the key-encryption key.
CREATE TABLE signing_keys (
    kid                TEXT PRIMARY KEY,
    public_key         TEXT NOT NULL,
    sealed_private_key TEXT NOT NULL,
    created_at         BIGINT NOT NULL,
    retired_at         BIGINT,
    publish_until      BIGINT
);

-- Rate limits: one GCRA bucket per key (theoretical arrival time, microseconds).
CREATE TABLE rate_limits (
    bucket     TEXT PRIMARY KEY,
    tat_us     BIGINT NOT NULL
);

-- Audit: append-only, hash-chained. audit_head holds the chain's tip so that
-- concurrent writers (several replicas on PostgreSQL) serialise on one row.
CREATE TABLE audit (
    seq           BIGINT PRIMARY KEY,
    at_ms         BIGINT NOT NULL,
    event         TEXT NOT NULL,
    actor         TEXT NOT NULL,
    decision      TEXT NOT NULL,
    reason        TEXT,
    run_id        TEXT,
    capability_id TEXT,
    user_name     TEXT,
    action        TEXT,
    resource      TEXT,
    request_id    TEXT,
    detail        TEXT,
    prev_hash     TEXT NOT NULL,
    hash          TEXT NOT NULL
);

CREATE TABLE audit_head (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    seq  BIGINT NOT NULL,
    hash TEXT NOT NULL
);
INSERT INTO audit_head (id, seq, hash) VALUES (1, 0, '0000000000000000000000000000000000000000000000000000000000000000');

-- Readiness probe: one row rewritten with the current time, to prove the store
-- still commits writes (a read-only or full disk fails it).
CREATE TABLE store_probe (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    at_ms BIGINT NOT NULL
);
