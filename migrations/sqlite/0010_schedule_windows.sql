-- Scheduled capacity declared through the API (`POST /v1/pools/{name}/schedules`): each window a
-- row, its cancellation a row of its own. Windows in the configuration are not stored here.
CREATE TABLE schedule_windows (
    id    TEXT PRIMARY KEY NOT NULL,
    pool  TEXT NOT NULL,
    at_ms INTEGER NOT NULL,
    spec  TEXT NOT NULL
);
CREATE INDEX schedule_windows_by_pool ON schedule_windows (pool);
CREATE TABLE schedule_window_cancellations (
    window_id TEXT PRIMARY KEY NOT NULL REFERENCES schedule_windows (id),
    at_ms     INTEGER NOT NULL
);
CREATE TRIGGER schedule_windows_append_only_u BEFORE UPDATE ON schedule_windows
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
CREATE TRIGGER schedule_windows_append_only_d BEFORE DELETE ON schedule_windows
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
CREATE TRIGGER schedule_window_cancellations_append_only_u BEFORE UPDATE ON schedule_window_cancellations
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
CREATE TRIGGER schedule_window_cancellations_append_only_d BEFORE DELETE ON schedule_window_cancellations
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
