-- The readiness probe writes as many pages as an issuance does (a 32 KiB
-- filler), so a disk too full for an issuance fails the probe too, instead of
-- one small row still fitting in the WAL and reporting "ready".
ALTER TABLE store_probe ADD COLUMN filler BLOB;

-- Retention (docs/operations.md): ended runs are found by when they ended.
CREATE INDEX runs_ended ON runs (ended_at) WHERE ended_at IS NOT NULL;

-- Audit exports an administrator confirmed (`tessera audit export
-- --through-checkpoint`): rows first_seq..last_seq are held outside the store,
-- ending at the signed checkpoint `checkpoint` of row last_seq. Audit rows are
-- pruned only up to such a row.
CREATE TABLE audit_exports (
    id          TEXT PRIMARY KEY,
    first_seq   BIGINT NOT NULL,
    last_seq    BIGINT NOT NULL,
    last_hash   TEXT NOT NULL,
    checkpoint  TEXT NOT NULL,
    sha256      TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);

-- How far audit pruning may go: set in the transaction that writes the
-- `audit.pruned` row authorising it (which `audit verify` requires).
CREATE TABLE audit_prune (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    through_seq   BIGINT NOT NULL
);
