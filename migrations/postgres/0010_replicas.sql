-- Replicas that behave as one broker (issue 23, docs/architecture.md).

-- A rotated-in key is published at once and signs only from signs_from, later
-- than every replica's next key refresh; the keys it replaces get retired_at =
-- its signs_from. NULL (rows from before): from created_at.
ALTER TABLE signing_keys ADD COLUMN signs_from BIGINT;

-- The policy set in force, for every replica: each reload that changes it
-- publishes a new version (its files, their SHA-256, who and where), MACed
-- under a key derived from the KEK so that a store writer without the KEK
-- cannot publish one. Every replica switches to the highest valid version.
CREATE TABLE policy_versions (
    version      BIGINT PRIMARY KEY,
    sha256       TEXT NOT NULL,
    sources      TEXT NOT NULL,
    trigger      TEXT NOT NULL,
    replica      TEXT NOT NULL,
    published_at BIGINT NOT NULL,
    mac          TEXT NOT NULL
);

-- What each replica enforces, renewed with its heartbeat (GET /v1/admin/status).
ALTER TABLE broker_instances ADD COLUMN policy_version BIGINT;
ALTER TABLE broker_instances ADD COLUMN policy_sha256 TEXT;
ALTER TABLE broker_instances ADD COLUMN signing_kid TEXT;
ALTER TABLE broker_instances ADD COLUMN software TEXT;
ALTER TABLE broker_instances ADD COLUMN listen TEXT;
