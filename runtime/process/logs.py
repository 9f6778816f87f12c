"""Logging: one line per event, carrying worker, job, stage and document ids."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

CONTEXT_KEYS = ("worker", "job", "stage", "document", "attempt")


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ctx = " ".join(f"{k}={getattr(record, k)}" for k in CONTEXT_KEYS if hasattr(record, k))
        return f"{line} {ctx}" if ctx else line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update({k: str(getattr(record, k)) for k in CONTEXT_KEYS if hasattr(record, k)})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out)


def configure(level: str = "info", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
