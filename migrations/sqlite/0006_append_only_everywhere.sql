-- Every ledger table refuses UPDATE and DELETE (SQLite has no TRUNCATE; `DELETE FROM t` without
-- a WHERE is refused by the same trigger). The outbox, its deliveries and token revocations had
-- none: deleting a revocation brought a revoked token back.
CREATE TRIGGER alert_outbox_append_only_u BEFORE UPDATE ON alert_outbox
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
CREATE TRIGGER alert_outbox_append_only_d BEFORE DELETE ON alert_outbox
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
CREATE TRIGGER alert_deliveries_append_only_u BEFORE UPDATE ON alert_deliveries
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
CREATE TRIGGER alert_deliveries_append_only_d BEFORE DELETE ON alert_deliveries
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
CREATE TRIGGER api_token_revocations_append_only_u BEFORE UPDATE ON api_token_revocations
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
CREATE TRIGGER api_token_revocations_append_only_d BEFORE DELETE ON api_token_revocations
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
