-- The controller's decisions, one row per distinct decision (repeats folded into it), so a team
-- can audit or compare them (shadow mode) after any restart.
CREATE TABLE decisions (
    seq    BIGSERIAL PRIMARY KEY,
    pool   TEXT NOT NULL,
    at     TIMESTAMPTZ NOT NULL,
    record JSONB NOT NULL
);
CREATE INDEX decisions_by_pool ON decisions (pool, seq);
CREATE TRIGGER decisions_append_only BEFORE UPDATE OR DELETE ON decisions
    FOR EACH ROW EXECUTE FUNCTION headroom_append_only();
