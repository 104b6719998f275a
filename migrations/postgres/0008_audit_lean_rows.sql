-- Leaner audit rows (issue 20): about an eighth of what an issuance wrote
-- was redundant in its audit row.
--
-- * `prev_hash` NULL: the previous row's `hash`, which the chain already holds.
--   New rows store NULL; readers derive it from row seq - 1 (the genesis value
--   for seq 1). Rows written before keep their stored value, which the
--   verifier still checks against the previous row.
-- * `actor` NULL: the row's run (`run:<run_id>`), the actor of most rows.
--
-- Both derived values are read back exactly as they were hashed, so every
-- link verifies as before. (SQLite also rekeys the table on `seq`; on
-- PostgreSQL the primary key already is the table's only index.)
ALTER TABLE audit ALTER COLUMN prev_hash DROP NOT NULL;
ALTER TABLE audit ALTER COLUMN actor DROP NOT NULL;
