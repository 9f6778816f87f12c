"""Vision models: Cohere's hosted model, local OCR (RapidOCR), or none."""
