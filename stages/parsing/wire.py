"""What the parse stage and its parser process say to each other over a socket.

Each message is a 4-byte big-endian length and a msgpack body (msgspec). The worker sends
a :class:`ParseRequest`; the parser answers with :class:`Units` (pages or sections, a few
at a time, in order) and :class:`Log` records, then one :class:`Done` or :class:`Failed`.
A parser says :class:`Ready` once, when it has imported what reading needs.
"""

from __future__ import annotations

import socket
import struct

import msgspec

from stages.parsing.formats.unit import Unit

__all__ = [
    "Done",
    "Failed",
    "Log",
    "ParseRequest",
    "Ready",
    "Reply",
    "Units",
    "receive_reply",
    "receive_request",
    "send",
]

_LENGTH = struct.Struct(">I")


class ParseRequest(msgspec.Struct, frozen=True, tag=True):
    """Read the document at ``path`` (``filename`` is how messages name it)."""

    path: str
    filename: str
    media_type: str
    min_image_px: int
    min_image_bytes: int
    max_image_pixels: int
    trim_cache_every_pages: int
    #: The parser's address space while it reads the document, in MB (0: no limit).
    memory_mb: int = 0
    #: CPU seconds the document may take (0: no limit).
    cpu_s: int = 0
    #: Characters of text the document may have (0: no limit).
    max_chars: int = 0
    #: A PDF's structure too: each page's blocks with their boxes, the outline's
    #: sections, tables (:class:`~stages.parsing.formats.unit.Layout`).
    layout: bool = True


class Units(msgspec.Struct, frozen=True, tag=True):
    units: list[Unit]


class Log(msgspec.Struct, frozen=True, tag=True):
    """A log record of the parser's, logged again by the worker under ``logger``."""

    level: int
    logger: str
    message: str


class Done(msgspec.Struct, frozen=True, tag=True):
    """The document is read. ``retire``: the parser exits now (it kept more memory than a
    next document should start with); the worker starts a new one for the next."""

    retire: bool = False


class Failed(msgspec.Struct, frozen=True, tag=True):
    """The document could not be read: ``kind`` is the exception's class name.
    ``retire``: the parser exits now (a limit was exceeded: whatever state the failed
    allocation left is not the next document's)."""

    kind: str
    message: str
    retire: bool = False


class Ready(msgspec.Struct, frozen=True, tag=True):
    """The parser has started: its imports are done and it waits for requests."""


Reply = Units | Log | Done | Failed | Ready

_encode = msgspec.msgpack.Encoder().encode
_requests = msgspec.msgpack.Decoder(ParseRequest)
_replies = msgspec.msgpack.Decoder(Reply)


def send(sock: socket.socket, message: ParseRequest | Reply) -> None:
    body = _encode(message)
    sock.sendall(_LENGTH.pack(len(body)) + body)


def receive_request(sock: socket.socket) -> ParseRequest:
    """The next request (the parser's side).

    :raises EOFError: the worker closed the socket (or died).
    """
    return _requests.decode(_frame(sock))


def receive_reply(sock: socket.socket) -> Reply:
    """The next reply (the worker's side).

    :raises EOFError: the parser closed the socket (or died).
    """
    reply: Reply = _replies.decode(_frame(sock))
    return reply


def _frame(sock: socket.socket) -> bytearray:
    (length,) = _LENGTH.unpack(_read(sock, _LENGTH.size))
    return _read(sock, length)


def _read(sock: socket.socket, size: int) -> bytearray:
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise EOFError("the other end closed the connection")
        got += n
    return buffer
