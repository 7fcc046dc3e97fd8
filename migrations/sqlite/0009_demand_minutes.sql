-- Each pool's measured demand by minute (the most replicas its reactive rules asked for), the
-- history the forecaster reads: a process that takes a pool reads it back instead of starting
-- blind. A minute is written once, by the pool's owner, after it ends.
CREATE TABLE demand_minutes (
    pool     TEXT NOT NULL,
    minute   INTEGER NOT NULL,
    replicas INTEGER NOT NULL CHECK (replicas >= 0),
    PRIMARY KEY (pool, minute)
);
CREATE TRIGGER demand_minutes_append_only_u BEFORE UPDATE ON demand_minutes
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
CREATE TRIGGER demand_minutes_append_only_d BEFORE DELETE ON demand_minutes
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
