"""``ragline serve``: the HTTP API, its live document events and the web view.

One ASGI app (Litestar on uvicorn) that stores uploads and enqueues them, reads documents
and stages, searches, and streams document state changes over SSE. It never runs stages:
workers do, in their own processes, against the same database.
"""
