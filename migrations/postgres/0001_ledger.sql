-- Headroom ledger, PostgreSQL backend (production). Append-only: balances, states and reports
-- are derived from these rows; a trigger refuses UPDATE, DELETE and TRUNCATE on every table.

CREATE TABLE capacity_requests (
    id              TEXT PRIMARY KEY,
    pool            TEXT NOT NULL,
    replicas        INTEGER NOT NULL CHECK (replicas > 0),
    priority        TEXT NOT NULL CHECK (priority IN ('low', 'normal', 'high', 'critical')),
    idempotency_key TEXT UNIQUE,
    created_at      TIMESTAMPTZ NOT NULL
);

CREATE TABLE request_cancellations (
    request_id TEXT PRIMARY KEY REFERENCES capacity_requests (id),
    at         TIMESTAMPTZ NOT NULL
);

-- One row per node state change. The first row of a launch is its intent (state 'requested',
-- with the client token sent to the cloud and the budget hold); every cloud call is followed by
-- an outcome row.
CREATE TABLE node_events (
    seq           BIGSERIAL PRIMARY KEY,
    node_id       TEXT NOT NULL,
    pool          TEXT NOT NULL,
    account       TEXT NOT NULL,
    offering_id   TEXT NOT NULL,
    provider      TEXT NOT NULL,
    region        TEXT NOT NULL,
    zone          TEXT NOT NULL,
    instance_type TEXT NOT NULL,
    market        TEXT NOT NULL,
    request_id    TEXT REFERENCES capacity_requests (id),
    destination   TEXT NOT NULL CHECK (destination IN ('serve', 'warm')),
    state         TEXT NOT NULL,
    instance_id   TEXT,
    client_token  TEXT NOT NULL,
    price_micros  BIGINT NOT NULL,
    gpus          INTEGER NOT NULL CHECK (gpus > 0),
    hold_micros   BIGINT NOT NULL,
    reason        TEXT,
    at            TIMESTAMPTZ NOT NULL,
    -- Identifies the write, so a write repeated after a lost acknowledgement counts once.
    event_key     TEXT NOT NULL UNIQUE
);
CREATE INDEX node_events_by_node ON node_events (node_id, seq);
-- A node ends once: a second terminal event for it is refused.
CREATE UNIQUE INDEX node_events_one_end ON node_events (node_id) WHERE state IN ('terminated', 'refused');
CREATE INDEX node_events_by_account ON node_events (account, seq);
CREATE INDEX node_events_by_request ON node_events (request_id) WHERE request_id IS NOT NULL;

CREATE TABLE refusals (
    seq         BIGSERIAL PRIMARY KEY,
    pool        TEXT NOT NULL,
    request_id  TEXT REFERENCES capacity_requests (id),
    node_id     TEXT,
    offering_id TEXT,
    replicas    INTEGER NOT NULL CHECK (replicas > 0),
    reason      TEXT NOT NULL,
    detail      TEXT NOT NULL,
    at          TIMESTAMPTZ NOT NULL,
    refusal_key TEXT NOT NULL UNIQUE
);
CREATE INDEX refusals_by_request ON refusals (request_id) WHERE request_id IS NOT NULL;

CREATE TABLE budget_versions (
    seq                    BIGSERIAL PRIMARY KEY,
    account                TEXT NOT NULL,
    period                 TEXT NOT NULL CHECK (period IN ('hour', 'day', 'month')),
    ceiling_micros         BIGINT NOT NULL CHECK (ceiling_micros > 0),
    currency               TEXT NOT NULL DEFAULT 'USD' CHECK (currency = 'USD'),
    soft_threshold_percent INTEGER NOT NULL CHECK (soft_threshold_percent BETWEEN 1 AND 100),
    hard_action            TEXT NOT NULL CHECK (hard_action IN ('refuse', 'clamp', 'shed-lowest-tier')),
    at                     TIMESTAMPTZ NOT NULL
);
CREATE INDEX budget_versions_by_account ON budget_versions (account, seq);

CREATE FUNCTION headroom_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ledger is append-only: % on % refused', TG_OP, TG_TABLE_NAME;
END
$$;

CREATE TRIGGER capacity_requests_append_only BEFORE UPDATE OR DELETE ON capacity_requests
    FOR EACH ROW EXECUTE FUNCTION headroom_append_only();
CREATE TRIGGER request_cancellations_append_only BEFORE UPDATE OR DELETE ON request_cancellations
    FOR EACH ROW EXECUTE FUNCTION headroom_append_only();
CREATE TRIGGER node_events_append_only BEFORE UPDATE OR DELETE ON node_events
    FOR EACH ROW EXECUTE FUNCTION headroom_append_only();
CREATE TRIGGER refusals_append_only BEFORE UPDATE OR DELETE ON refusals
    FOR EACH ROW EXECUTE FUNCTION headroom_append_only();
CREATE TRIGGER budget_versions_append_only BEFORE UPDATE OR DELETE ON budget_versions
    FOR EACH ROW EXECUTE FUNCTION headroom_append_only();
CREATE TRIGGER capacity_requests_no_truncate BEFORE TRUNCATE ON capacity_requests
    FOR EACH STATEMENT EXECUTE FUNCTION headroom_append_only();
CREATE TRIGGER request_cancellations_no_truncate BEFORE TRUNCATE ON request_cancellations
    FOR EACH STATEMENT EXECUTE FUNCTION headroom_append_only();
CREATE TRIGGER node_events_no_truncate BEFORE TRUNCATE ON node_events
    FOR EACH STATEMENT EXECUTE FUNCTION headroom_append_only();
CREATE TRIGGER refusals_no_truncate BEFORE TRUNCATE ON refusals
    FOR EACH STATEMENT EXECUTE FUNCTION headroom_append_only();
CREATE TRIGGER budget_versions_no_truncate BEFORE TRUNCATE ON budget_versions
    FOR EACH STATEMENT EXECUTE FUNCTION headroom_append_only();
