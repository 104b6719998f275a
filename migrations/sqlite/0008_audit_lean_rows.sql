-- Leaner audit rows (issue 20): about an eighth of what an issuance wrote
-- was redundant in its audit row.
--
-- * `seq INTEGER PRIMARY KEY`: the sequence number becomes the table's rowid,
--   so the B-tree is keyed on it directly instead of on a hidden rowid plus a
--   second index on `seq` (sqlite_autoindex_audit_1).
-- * `prev_hash` NULL: the previous row's `hash`, which the chain already holds.
--   New rows store NULL; readers derive it from row seq - 1 (the genesis value
--   for seq 1). Rows written before keep their stored value, which the
--   verifier still checks against the previous row.
-- * `actor` NULL: the row's run (`run:<run_id>`), the actor of most rows.
--
-- Both derived values are read back exactly as they were hashed, so every
-- link verifies as before. SQLite cannot change a column's constraints or a
-- table's key in place: the table is rebuilt, in this migration's transaction.
-- The old `seq BIGINT PRIMARY KEY` was no rowid alias and kept any value; the
-- new one takes integers only. A row whose seq is not one (only an edit of the
-- file can have put it there) stops the migration with this constraint's name
-- rather than a bare datatype mismatch half-way through the copy.
CREATE TEMP TABLE audit_lean_guard (
    bad_rows INTEGER CONSTRAINT audit_seq_is_an_integer CHECK (bad_rows = 0)
);
INSERT INTO audit_lean_guard SELECT COUNT(*) FROM audit WHERE typeof(seq) <> 'integer';
DROP TABLE audit_lean_guard;
CREATE TABLE audit_lean (
    seq           INTEGER PRIMARY KEY,
    at_ms         BIGINT NOT NULL,
    event         TEXT NOT NULL,
    actor         TEXT,
    decision      TEXT NOT NULL,
    reason        TEXT,
    run_id        TEXT,
    capability_id TEXT,
    user_name     TEXT,
    action        TEXT,
    resource      TEXT,
    request_id    TEXT,
    detail        TEXT,
    prev_hash     TEXT,
    hash          TEXT NOT NULL,
    task_id       TEXT,
    key_id        TEXT
);
INSERT INTO audit_lean (seq, at_ms, event, actor, decision, reason, run_id, capability_id,
                        user_name, action, resource, request_id, detail, prev_hash, hash,
                        task_id, key_id)
SELECT seq, at_ms, event, actor, decision, reason, run_id, capability_id, user_name, action,
       resource, request_id, detail, prev_hash, hash, task_id, key_id
FROM audit ORDER BY seq;
DROP TABLE audit;
ALTER TABLE audit_lean RENAME TO audit;
