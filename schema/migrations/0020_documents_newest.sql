-- 0020: documents newest first without a sort. The HTTP documents list, the web view's
-- list and `list_documents` read the newest page (or the page after a cursor) by walking
-- this index; without it every page sorted the whole table (a sequential scan: 280 ms at a
-- million documents, issue 37).
CREATE INDEX documents_newest ON documents (created_at DESC, id DESC);
