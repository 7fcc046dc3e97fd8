-- Budget admissions without an account lock: each checkpoint names the one it follows
-- (prev_seq, 0 for an account's first), and an account's checkpoint has one successor at most.
-- An admission reads the account's latest checkpoint, decides, and writes its events with the
-- next checkpoint in one statement; when another admission of the account committed first, the
-- write meets this index, nothing of it lands, and the admission is decided again. Rows written
-- before this migration have no prev_seq (NULLs never collide).
ALTER TABLE standing_checkpoints ADD COLUMN prev_seq BIGINT;
CREATE UNIQUE INDEX standing_checkpoints_one_successor ON standing_checkpoints (account, prev_seq);
