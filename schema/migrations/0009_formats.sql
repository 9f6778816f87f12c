-- 0009: formats beyond PDF.
--
-- pages.section: where a format has no pages (text, Markdown, HTML, DOCX), its pages are
-- numbered sections and this is the label search shows with them: the heading path or
-- the line range; for reflowable books (EPUB, MOBI, FB2), the chapter of the page. NULL
-- for PDFs and for rows written before this migration.
-- chunks.section: the section of the chunk's first page, copied when it is cut, so the
-- index payload carries it without a join.
-- Adding a nullable column without a default is a catalog change only (no rewrite).

ALTER TABLE pages ADD COLUMN section text;
ALTER TABLE chunks ADD COLUMN section text;
