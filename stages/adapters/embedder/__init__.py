"""Embedders: Cohere's hosted models and the local int8 MiniLM."""
