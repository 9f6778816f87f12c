"""Rerankers: Cohere's ``/v2/rerank`` (:mod:`stages.adapters.reranker.cohere`)."""
