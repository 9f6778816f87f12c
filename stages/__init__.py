"""ragline's RAG pipeline: parse, chunk, vision, embed, index, and the services they call."""
