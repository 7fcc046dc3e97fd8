-- Paged lists read one page through an index, not the whole table: capacity requests per pool
-- newest first (`GET /v1/capacity-requests`, by created_at then id) and a pool's ledger in
-- order (`GET /v1/pools/{name}/ledger`, by seq).
CREATE INDEX capacity_requests_by_pool ON capacity_requests (pool, created_at_ms, id);
CREATE INDEX node_events_by_pool ON node_events (pool, seq);
