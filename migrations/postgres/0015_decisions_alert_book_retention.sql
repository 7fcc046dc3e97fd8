-- The decision log and the alert book keep a retention, as the controller memory does (0014),
-- instead of growing without bound. In the transaction that adds a row, the ledger deletes the
-- same pool's (scope's) rows more than the table's retention older than it, through an index
-- on (key, at):
-- * `decisions`, the audit log `GET /v1/pools/{name}/decisions` pages and shadow reports read,
--   keeps 30 days (`DECISION_RETENTION`, crates/headroom-ledger). A row's `at` is the last
--   instant it speaks for (a decision's last activation, an event's time).
-- * `alert_book`, of which only each scope's newest row is ever read back, keeps an hour
--   (`ALERT_BOOK_RETENTION`).
-- Both tables still refuse UPDATE and TRUNCATE, and refuse to DELETE a row unless a later row of
-- the same pool (scope) is more than the retention newer, whoever asks: a row inside the
-- retention, and so a key's newest row, is never lost. The intervals here are the constants'.
-- The runtime role is granted DELETE on these tables (`headroom migrate --runtime-role`).
CREATE INDEX decisions_by_pool_at ON decisions (pool, at);

-- One function for both tables, the retention its trigger's argument; a query a table, as the
-- key is `pool` on one and `scope` on the other.
CREATE FUNCTION headroom_keeps_retention() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    superseded boolean := false;
BEGIN
    IF TG_OP = 'DELETE' AND TG_TABLE_NAME = 'decisions' THEN
        superseded := EXISTS (
            SELECT 1 FROM decisions d
            WHERE d.pool = OLD.pool AND d.at > OLD.at + TG_ARGV[0]::interval
        );
    ELSIF TG_OP = 'DELETE' AND TG_TABLE_NAME = 'alert_book' THEN
        superseded := EXISTS (
            SELECT 1 FROM alert_book b
            WHERE b.scope = OLD.scope AND b.at > OLD.at + TG_ARGV[0]::interval
        );
    END IF;
    IF superseded THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'ledger is append-only: % on % refused (only a row more than % older than a later row of its pool or scope may be deleted)',
        TG_OP, TG_TABLE_NAME, TG_ARGV[0];
END
$$;
DROP TRIGGER decisions_append_only ON decisions;
CREATE TRIGGER decisions_append_only BEFORE UPDATE OR DELETE ON decisions
    FOR EACH ROW EXECUTE FUNCTION headroom_keeps_retention('30 days');
DROP TRIGGER alert_book_append_only ON alert_book;
CREATE TRIGGER alert_book_append_only BEFORE UPDATE OR DELETE ON alert_book
    FOR EACH ROW EXECUTE FUNCTION headroom_keeps_retention('1 hour');
