-- Which capabilities belong to a run, written behind the issuances (issue 20,
-- store/run_index.rs, docs/architecture.md "Group commit").
--
-- The index capabilities(run_id) changed one index page per distinct run in
-- every group commit. run_capabilities holds the same pairs, filled from the
-- audit rows that issued them (commit order: seq), many commits' worth at a
-- time; through_seq is the last audit row read. Readers add the rows after it.
-- No foreign keys: it is derived, deleted with its run by retention.
CREATE TABLE run_capabilities (
    run_id        TEXT NOT NULL,
    capability_id TEXT NOT NULL,
    PRIMARY KEY (run_id, capability_id)
) WITHOUT ROWID;
INSERT INTO run_capabilities (run_id, capability_id) SELECT run_id, id FROM capabilities;

CREATE TABLE run_capabilities_mark (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    through_seq BIGINT NOT NULL
);
INSERT INTO run_capabilities_mark (id, through_seq)
SELECT 1, COALESCE((SELECT MAX(seq) FROM audit), 0);

-- capabilities is rebuilt without its foreign key to runs: with no index led
-- by run_id, SQLite would check that key on every deleted run by reading the
-- whole table (retention deletes runs by the hundred). The writer only records
-- a capability for a run it has just read as active, and retention deletes a
-- run's capabilities (through run_capabilities) before the run.
--
-- In the migration's transaction: leases still reference capabilities(id),
-- so the old table's implicit DELETE leaves deferred violations that the
-- copy's INSERT (the same ids) clears again before the commit checks them.
PRAGMA defer_foreign_keys = ON;
CREATE TABLE capabilities_copy AS SELECT
    id, run_id, kid, action, resource, backend, policies, issued_at, expires_at, uses,
    uses_left, revoked_at, revoke_reason, hold_secs, lapses_at, slot, arguments,
    args_hash, approval_id
FROM capabilities;
DROP TABLE capabilities;
CREATE TABLE capabilities (
    id            TEXT PRIMARY KEY,
    run_id        TEXT NOT NULL,
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
    revoke_reason TEXT,
    hold_secs     BIGINT,
    lapses_at     BIGINT,
    slot          TEXT,
    arguments     TEXT,
    args_hash     TEXT,
    approval_id   TEXT
) WITHOUT ROWID;
INSERT INTO capabilities SELECT * FROM capabilities_copy ORDER BY id;
DROP TABLE capabilities_copy;
CREATE INDEX capabilities_lapse ON capabilities(lapses_at)
    WHERE lapses_at IS NOT NULL AND revoked_at IS NULL;
-- A slot's earlier capabilities are superseded in the issuing transaction:
-- only capabilities issued in a slot need to be found by run at once.
CREATE INDEX capabilities_slot ON capabilities(run_id, slot) WHERE slot IS NOT NULL;
