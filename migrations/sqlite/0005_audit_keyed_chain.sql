-- A keyed audit chain and signed checkpoints (issue 12).
--
-- key_id NULL: the row's link is the original unkeyed SHA-256 (rows written
-- before this migration; they stay verifiable as such and are reported as
-- unkeyed). Otherwise the link is HMAC-SHA256 under the audit key `key_id`,
-- whose secret is stored only sealed by the KEK, so whoever can write the
-- database but lacks the KEK cannot edit, insert or delete a row and recompute.
ALTER TABLE audit ADD COLUMN key_id TEXT;

-- unkeyed_until_seq: the last row that was already written, unkeyed, when the
-- key was created; sealed with the key (AEAD associated data), so no row after
-- it can pass as unkeyed.
CREATE TABLE audit_keys (
    id                TEXT PRIMARY KEY,
    sealed            TEXT NOT NULL,
    created_at        BIGINT NOT NULL,
    unkeyed_until_seq BIGINT NOT NULL
);

-- The head when this migration ran: the rows an unkeyed (older) broker wrote.
-- An audit key created later may let only these pass as unkeyed; a broker
-- that finds keyed rows but no key refuses to start instead of making one.
CREATE TABLE audit_unkeyed_prefix (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    until_seq BIGINT NOT NULL
);
INSERT INTO audit_unkeyed_prefix (id, until_seq) SELECT 1, seq FROM audit_head WHERE id = 1;

-- Signed checkpoints of the chain head, handed to witnesses outside the
-- database; the witness_* columns are the durable outbox of the HTTP witness.
CREATE TABLE audit_checkpoints (
    seq              BIGINT PRIMARY KEY,
    hash             TEXT NOT NULL,
    at_ms            BIGINT NOT NULL,
    jws              TEXT NOT NULL,
    created_at       BIGINT NOT NULL,
    witness_done_at  BIGINT,
    witness_attempts INTEGER NOT NULL DEFAULT 0,
    witness_next_at  BIGINT NOT NULL DEFAULT 0,
    witness_error    TEXT
);
