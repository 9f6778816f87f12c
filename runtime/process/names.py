"""Names are data: file names printed or stored as one line of valid text.

A file name may hold bytes that are not UTF-8 (PostgreSQL refuses those in a text
column) and control characters such as a newline (which would forge lines in the
output). :func:`escape_name` turns the first into ``\\xNN`` and the second into ``\\n``,
``\\t`` or ``\\xNN``, so a name is stored as given, readably, and printed on one line.
"""

from __future__ import annotations

import os

_CONTROL = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_name(name: str | bytes) -> str:
    """``name`` as printable text; names that need no escaping come back unchanged."""
    raw = name if isinstance(name, bytes) else os.fsencode(name)
    text = raw.decode("utf-8", errors="backslashreplace")
    return "".join(c if c.isprintable() else _escape_char(c) for c in text)


def _escape_char(c: str) -> str:
    if c in _CONTROL:
        return _CONTROL[c]
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"
