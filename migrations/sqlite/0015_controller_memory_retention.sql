-- The controller memory keeps each pool's newest row plus its rows younger than a retention;
-- older rows are deleted by the ledger. See the PostgreSQL migration 0014. UPDATE is still
-- refused, and so is a DELETE of a pool's newest row (one with no later row of the same pool).
DROP TRIGGER controller_memory_append_only_d;
CREATE TRIGGER controller_memory_append_only_d BEFORE DELETE ON controller_memory
WHEN NOT EXISTS (
    SELECT 1 FROM controller_memory c WHERE c.pool = OLD.pool AND c.at_ms > OLD.at_ms
)
BEGIN SELECT RAISE(ABORT, 'ledger is append-only: a pool''s newest controller memory cannot be deleted'); END;
