-- The alerts firing per scope (a pool's name, or '' for deployment-wide alerts), as JSON the
-- engine writes and reads back: a process that takes a pool keeps its alerts' startsAt and
-- repeat times instead of sending every firing alert again as new. Append-only like every
-- table: the scope's owner adds a row when its active alerts change (an empty list once all
-- resolved); the latest row is the book.
CREATE TABLE alert_book (
    scope TEXT NOT NULL,
    at_ms INTEGER NOT NULL,
    body  TEXT NOT NULL,
    PRIMARY KEY (scope, at_ms)
);
CREATE TRIGGER alert_book_append_only_u BEFORE UPDATE ON alert_book
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
CREATE TRIGGER alert_book_append_only_d BEFORE DELETE ON alert_book
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
