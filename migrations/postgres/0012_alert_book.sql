-- The alerts firing per scope (a pool's name, or '' for deployment-wide alerts), as JSON the
-- engine writes and reads back: a process that takes a pool keeps its alerts' startsAt and
-- repeat times instead of sending every firing alert again as new. Append-only like every
-- table: the scope's owner adds a row when its active alerts change (an empty list once all
-- resolved); the latest row is the book.
CREATE TABLE alert_book (
    scope TEXT NOT NULL,
    at    TIMESTAMPTZ NOT NULL,
    body  TEXT NOT NULL,
    PRIMARY KEY (scope, at)
);
CREATE TRIGGER alert_book_append_only BEFORE UPDATE OR DELETE ON alert_book
    FOR EACH ROW EXECUTE FUNCTION headroom_append_only();
CREATE TRIGGER alert_book_no_truncate BEFORE TRUNCATE ON alert_book
    FOR EACH STATEMENT EXECUTE FUNCTION headroom_append_only();
