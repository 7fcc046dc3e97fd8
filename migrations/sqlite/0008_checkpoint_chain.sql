-- Budget admissions without an account lock; see the PostgreSQL migration 0007.
ALTER TABLE standing_checkpoints ADD COLUMN prev_seq INTEGER;
CREATE UNIQUE INDEX standing_checkpoints_one_successor ON standing_checkpoints (account, prev_seq);
