-- 0024: a chunk's keyword vector, computed where the chunk is cut (issue 34: the index
-- stage's cost a point). With the embedded index one process writes the shard, so the
-- index stage's CPU is serial; the vector depends only on the chunk's text and section,
-- so the chunk and vision stages compute it (in every process) and the index stage reads
-- it. stages.text.keywords.stored_vector: a format byte, uint32 term indices, float32
-- weights. NULL (rows from before, or a stored format the code no longer writes): the
-- index stage computes it.
ALTER TABLE chunks ADD COLUMN keywords bytea;
