-- Scheduled capacity declared through the API (`POST /v1/pools/{name}/schedules`): each window a
-- row, its cancellation a row of its own. Windows in the configuration are not stored here.
CREATE TABLE schedule_windows (
    id   TEXT PRIMARY KEY,
    pool TEXT NOT NULL,
    at   TIMESTAMPTZ NOT NULL,
    spec JSONB NOT NULL
);
CREATE INDEX schedule_windows_by_pool ON schedule_windows (pool);
CREATE TABLE schedule_window_cancellations (
    window_id TEXT PRIMARY KEY REFERENCES schedule_windows (id),
    at        TIMESTAMPTZ NOT NULL
);
CREATE TRIGGER schedule_windows_append_only BEFORE UPDATE OR DELETE ON schedule_windows
    FOR EACH ROW EXECUTE FUNCTION headroom_append_only();
CREATE TRIGGER schedule_windows_no_truncate BEFORE TRUNCATE ON schedule_windows
    FOR EACH STATEMENT EXECUTE FUNCTION headroom_append_only();
CREATE TRIGGER schedule_window_cancellations_append_only BEFORE UPDATE OR DELETE ON schedule_window_cancellations
    FOR EACH ROW EXECUTE FUNCTION headroom_append_only();
CREATE TRIGGER schedule_window_cancellations_no_truncate BEFORE TRUNCATE ON schedule_window_cancellations
    FOR EACH STATEMENT EXECUTE FUNCTION headroom_append_only();
