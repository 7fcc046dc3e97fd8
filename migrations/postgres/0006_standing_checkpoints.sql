-- Per-account running totals for budget admissions, so an admission reads the latest row and the
-- histories of the nodes still open instead of the account's whole history. Append-only like
-- every ledger table: each admission that places a hold adds the next row.
--   settled_micros  spend within the period starting at period_start of node activations that
--                   had ended (parked warm or final) by the row's time
--   open_nodes      node_id:seq pairs of the activations still open, seq the run's first event
CREATE TABLE standing_checkpoints (
    seq            BIGSERIAL PRIMARY KEY,
    account        TEXT NOT NULL,
    period         TEXT NOT NULL CHECK (period IN ('hour', 'day', 'month')),
    period_start   TIMESTAMPTZ NOT NULL,
    settled_micros BIGINT NOT NULL CHECK (settled_micros >= 0),
    open_nodes     TEXT NOT NULL,
    at             TIMESTAMPTZ NOT NULL
);
CREATE INDEX standing_checkpoints_by_account ON standing_checkpoints (account, seq);
CREATE TRIGGER standing_checkpoints_append_only BEFORE UPDATE OR DELETE ON standing_checkpoints
    FOR EACH ROW EXECUTE FUNCTION headroom_append_only();
CREATE TRIGGER standing_checkpoints_no_truncate BEFORE TRUNCATE ON standing_checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION headroom_append_only();
