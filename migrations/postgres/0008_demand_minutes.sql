-- Each pool's measured demand by minute (the most replicas its reactive rules asked for), the
-- history the forecaster reads: a process that takes a pool reads it back instead of starting
-- blind. A minute is written once, by the pool's owner, after it ends.
CREATE TABLE demand_minutes (
    pool     TEXT NOT NULL,
    minute   BIGINT NOT NULL,
    replicas BIGINT NOT NULL CHECK (replicas >= 0),
    PRIMARY KEY (pool, minute)
);
CREATE TRIGGER demand_minutes_append_only BEFORE UPDATE OR DELETE ON demand_minutes
    FOR EACH ROW EXECUTE FUNCTION headroom_append_only();
CREATE TRIGGER demand_minutes_no_truncate BEFORE TRUNCATE ON demand_minutes
    FOR EACH STATEMENT EXECUTE FUNCTION headroom_append_only();
