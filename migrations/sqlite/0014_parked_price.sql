-- What a node costs while parked warm; see the PostgreSQL migration 0013.
ALTER TABLE node_events ADD COLUMN parked_price_micros INTEGER NOT NULL DEFAULT 0;
