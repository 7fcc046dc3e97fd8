-- Headroom ledger, SQLite backend. Append-only: balances, states and reports are derived from
-- these rows; triggers refuse UPDATE and DELETE so nothing finance audits can be rewritten.

CREATE TABLE capacity_requests (
    id              TEXT PRIMARY KEY NOT NULL,
    pool            TEXT NOT NULL,
    replicas        INTEGER NOT NULL CHECK (replicas > 0),
    priority        TEXT NOT NULL CHECK (priority IN ('low', 'normal', 'high', 'critical')),
    idempotency_key TEXT UNIQUE,
    created_at_ms   INTEGER NOT NULL
);

CREATE TABLE request_cancellations (
    request_id   TEXT PRIMARY KEY NOT NULL REFERENCES capacity_requests (id),
    at_ms        INTEGER NOT NULL
);

-- One row per node state change. The first row of a launch is its intent (state 'requested',
-- with the client token sent to the cloud); every cloud call is followed by an outcome row.
CREATE TABLE node_events (
    seq                INTEGER PRIMARY KEY AUTOINCREMENT,
    node_id            TEXT NOT NULL,
    pool               TEXT NOT NULL,
    account            TEXT NOT NULL,
    offering_id        TEXT NOT NULL,
    provider           TEXT NOT NULL,
    region             TEXT NOT NULL,
    zone               TEXT NOT NULL,
    instance_type      TEXT NOT NULL,
    market             TEXT NOT NULL,
    request_id         TEXT REFERENCES capacity_requests (id),
    destination        TEXT NOT NULL CHECK (destination IN ('serve', 'warm')),
    state              TEXT NOT NULL,
    instance_id        TEXT,
    client_token       TEXT NOT NULL,
    price_micros       INTEGER NOT NULL,
    gpus               INTEGER NOT NULL CHECK (gpus > 0),
    hold_micros        INTEGER NOT NULL,
    reason             TEXT,
    at_ms              INTEGER NOT NULL,
    -- Identifies the write, so a write repeated after a lost acknowledgement counts once.
    event_key          TEXT NOT NULL UNIQUE
);
CREATE INDEX node_events_by_node ON node_events (node_id, seq);
-- A node ends once: a second terminal event for it is refused.
CREATE UNIQUE INDEX node_events_one_end ON node_events (node_id) WHERE state IN ('terminated', 'refused');
CREATE INDEX node_events_by_request ON node_events (request_id) WHERE request_id IS NOT NULL;

-- Every "no": from a cloud (one offering refused, the planner fell back), from the governor
-- (budget, max replicas) or from the planner (no offering left).
CREATE TABLE refusals (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    pool         TEXT NOT NULL,
    request_id   TEXT REFERENCES capacity_requests (id),
    node_id      TEXT,
    offering_id  TEXT,
    replicas     INTEGER NOT NULL CHECK (replicas > 0),
    reason       TEXT NOT NULL,
    detail       TEXT NOT NULL,
    at_ms        INTEGER NOT NULL,
    refusal_key  TEXT NOT NULL UNIQUE
);
CREATE INDEX refusals_by_request ON refusals (request_id) WHERE request_id IS NOT NULL;

CREATE TRIGGER capacity_requests_append_only_u BEFORE UPDATE ON capacity_requests
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
CREATE TRIGGER capacity_requests_append_only_d BEFORE DELETE ON capacity_requests
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
CREATE TRIGGER request_cancellations_append_only_u BEFORE UPDATE ON request_cancellations
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
CREATE TRIGGER request_cancellations_append_only_d BEFORE DELETE ON request_cancellations
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
CREATE TRIGGER node_events_append_only_u BEFORE UPDATE ON node_events
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
CREATE TRIGGER node_events_append_only_d BEFORE DELETE ON node_events
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
CREATE TRIGGER refusals_append_only_u BEFORE UPDATE ON refusals
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
CREATE TRIGGER refusals_append_only_d BEFORE DELETE ON refusals
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
