-- Each pool's scaling-controller memory (breach windows, stabilisation, cooldowns, the recent
-- levels and arrivals), as JSON the engine writes and reads back: a process that takes a pool
-- decides as its last owner would have, instead of starting afresh. Append-only like every
-- table: the pool's owner adds a row when the memory's state changes and at least once a
-- minute while it changes otherwise; the latest row is the memory.
CREATE TABLE controller_memory (
    pool  TEXT NOT NULL,
    at_ms INTEGER NOT NULL,
    body  TEXT NOT NULL,
    PRIMARY KEY (pool, at_ms)
);
CREATE TRIGGER controller_memory_append_only_u BEFORE UPDATE ON controller_memory
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
CREATE TRIGGER controller_memory_append_only_d BEFORE DELETE ON controller_memory
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
