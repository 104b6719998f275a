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
