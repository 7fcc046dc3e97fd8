-- The controller memory is the engine's working state, not the money ledger: only each pool's
-- newest row is ever read back, so the ledger keeps a pool's newest row plus its rows younger
-- than `CONTROLLER_MEMORY_RETENTION` (crates/headroom-ledger) and deletes the older ones in the
-- transaction that adds a row, by the primary key (pool, at). The table still refuses UPDATE
-- and TRUNCATE, and refuses to DELETE a pool's newest row (one with no later row of the same
-- pool), whoever asks: a pool's memory can be superseded, never lost. The runtime role is
-- granted DELETE on this table alone (`headroom migrate --runtime-role`).
CREATE FUNCTION headroom_controller_memory_keeps_newest() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND EXISTS (
        SELECT 1 FROM controller_memory c WHERE c.pool = OLD.pool AND c.at > OLD.at
    ) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'ledger is append-only: % on % refused (only rows a later row of the same pool supersedes may be deleted)',
        TG_OP, TG_TABLE_NAME;
END
$$;
DROP TRIGGER controller_memory_append_only ON controller_memory;
CREATE TRIGGER controller_memory_append_only BEFORE UPDATE OR DELETE ON controller_memory
    FOR EACH ROW EXECUTE FUNCTION headroom_controller_memory_keeps_newest();
