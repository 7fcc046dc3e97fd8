-- Every ledger table refuses UPDATE, DELETE and TRUNCATE. 0001 covered the first five tables;
-- the outbox, its deliveries and token revocations had no trigger (deleting a revocation brought
-- a revoked token back), and tokens and decisions still accepted TRUNCATE. Tables keep rows
-- forever: a delivery outcome, a revocation, a decision are new rows, never changes.
CREATE TRIGGER alert_outbox_append_only BEFORE UPDATE OR DELETE ON alert_outbox
    FOR EACH ROW EXECUTE FUNCTION headroom_append_only();
CREATE TRIGGER alert_deliveries_append_only BEFORE UPDATE OR DELETE ON alert_deliveries
    FOR EACH ROW EXECUTE FUNCTION headroom_append_only();
CREATE TRIGGER api_token_revocations_append_only BEFORE UPDATE OR DELETE ON api_token_revocations
    FOR EACH ROW EXECUTE FUNCTION headroom_append_only();
CREATE TRIGGER alert_outbox_no_truncate BEFORE TRUNCATE ON alert_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION headroom_append_only();
CREATE TRIGGER alert_deliveries_no_truncate BEFORE TRUNCATE ON alert_deliveries
    FOR EACH STATEMENT EXECUTE FUNCTION headroom_append_only();
CREATE TRIGGER api_token_revocations_no_truncate BEFORE TRUNCATE ON api_token_revocations
    FOR EACH STATEMENT EXECUTE FUNCTION headroom_append_only();
CREATE TRIGGER api_tokens_no_truncate BEFORE TRUNCATE ON api_tokens
    FOR EACH STATEMENT EXECUTE FUNCTION headroom_append_only();
CREATE TRIGGER decisions_no_truncate BEFORE TRUNCATE ON decisions
    FOR EACH STATEMENT EXECUTE FUNCTION headroom_append_only();
