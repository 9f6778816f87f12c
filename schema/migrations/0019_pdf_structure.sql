-- 0019: the structure of PDF pages (issue 35). A page keeps its layout: its text blocks'
-- offsets and boxes, the outline's headings on it, its table rows (msgpack of
-- stages.parsing.formats.unit.Layout; NULL for other formats and older rows). The chunk
-- stage reads it for sections, running headers, tables and boxes. A chunk keeps where its
-- text sits: (page, x0, y0, x1, y1) in points from the page's top left, five reals a
-- rectangle, and whether it is a piece of a table (its header row first).
ALTER TABLE pages ADD COLUMN layout bytea;
ALTER TABLE chunks
    ADD COLUMN boxes real[],
    ADD COLUMN is_table boolean NOT NULL DEFAULT false;
