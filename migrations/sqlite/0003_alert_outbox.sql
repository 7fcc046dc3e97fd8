-- Alert notifications waiting for delivery, so nothing is lost while a webhook is down. Rows
-- are appended; a delivery row (delivered or dropped) closes each.
CREATE TABLE alert_outbox (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    webhook    TEXT NOT NULL,
    body       TEXT NOT NULL,
    created_ms INTEGER NOT NULL
);
CREATE TABLE alert_deliveries (
    outbox_seq INTEGER PRIMARY KEY REFERENCES alert_outbox (seq),
    outcome    TEXT NOT NULL CHECK (outcome IN ('delivered', 'dropped')),
    at_ms      INTEGER NOT NULL
);
