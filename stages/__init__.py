"""ragline's RAG pipeline: parse, chunk, vision, embed, index, and the services they call."""

import sys

# PyMuPDF >= 1.27 imports its optional layout analyser at import time whenever
# pymupdf-layout is installed (PyMuPDF 2.0 requires it): onnxruntime sessions that cost
# ~0.3 s and ~55 MB in every worker process. ragline never calls Page.get_layout, so it
# keeps that import out; ``import pymupdf`` treats the missing module as not installed.
# The same for pymupdf4llm (also required by PyMuPDF 2.0; its OCR helpers import
# onnxruntime, ~20 MB): ragline never calls to_markdown/to_text/to_json.
if "pymupdf" not in sys.modules:
    sys.modules.setdefault("pymupdf.layout", None)  # type: ignore[arg-type]
    sys.modules.setdefault("pymupdf4llm", None)  # type: ignore[arg-type]
