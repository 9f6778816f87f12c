"""Pure text to chunks, no I/O: paragraphs, headings, token counts in the embedder's units,
packing."""
