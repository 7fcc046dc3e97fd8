-- What a node costs while parked warm (stopped: its volumes), per hour, as recorded on every
-- node event from its offering (`Offering::warm_usd_per_hour`). Rows written before this
-- migration read 0: a parked node was not billed when they were written, and stays so.
ALTER TABLE node_events ADD COLUMN parked_price_micros BIGINT NOT NULL DEFAULT 0;
