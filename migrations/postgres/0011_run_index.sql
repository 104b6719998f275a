-- Nothing changes on PostgreSQL (issue 20, store/run_index.rs).
--
-- On SQLite this migration replaces the index capabilities(run_id) with a
-- table filled behind the issuances, because SQLite writes a whole page per
-- index leaf a commit touches. PostgreSQL logs an index entry, not a page, and
-- measured no faster without the index, while the table made it slower
-- (docs/performance.md): it keeps capabilities_run.
SELECT 1;
