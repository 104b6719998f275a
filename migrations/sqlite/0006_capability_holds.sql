-- Holds: a capability asked for with a hold lapses unless its holder renews it
-- (`tessera exec` renews while its command runs). A lapse is a revocation with
-- reason `hold_lapsed`, made by the expiry sweeper, so a holder killed before it
-- could revoke still loses what it held within the hold plus one sweep.
ALTER TABLE capabilities ADD COLUMN hold_secs BIGINT;
ALTER TABLE capabilities ADD COLUMN lapses_at BIGINT;
CREATE INDEX capabilities_lapse ON capabilities(lapses_at)
    WHERE lapses_at IS NOT NULL AND revoked_at IS NULL;

-- Slots: a capability issued in a slot supersedes (revokes, reason
-- `superseded`) the run's earlier live capabilities in the same slot, in the
-- issuing transaction. What a credential helper called again and again
-- (`tessera credential-process`, a refreshing provider) asks for.
ALTER TABLE capabilities ADD COLUMN slot TEXT;
