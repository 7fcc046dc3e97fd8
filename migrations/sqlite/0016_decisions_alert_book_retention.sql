-- The decision log keeps 30 days and the alert book an hour; older rows are deleted by the
-- ledger as it adds one. See the PostgreSQL migration 0015. UPDATE is still refused, and so is a
-- DELETE of a row unless a later row of the same pool (scope) is more than the retention newer
-- (30 days, 2,592,000,000 ms; an hour, 3,600,000 ms).
CREATE INDEX decisions_by_pool_at ON decisions (pool, at_ms);

DROP TRIGGER decisions_append_only_d;
CREATE TRIGGER decisions_append_only_d BEFORE DELETE ON decisions
WHEN NOT EXISTS (
    SELECT 1 FROM decisions d WHERE d.pool = OLD.pool AND d.at_ms > OLD.at_ms + 2592000000
)
BEGIN SELECT RAISE(ABORT, 'ledger is append-only: a decision within 30 days of a later one of its pool cannot be deleted'); END;

DROP TRIGGER alert_book_append_only_d;
CREATE TRIGGER alert_book_append_only_d BEFORE DELETE ON alert_book
WHEN NOT EXISTS (
    SELECT 1 FROM alert_book b WHERE b.scope = OLD.scope AND b.at_ms > OLD.at_ms + 3600000
)
BEGIN SELECT RAISE(ABORT, 'ledger is append-only: an alert book within an hour of a later one of its scope cannot be deleted'); END;
