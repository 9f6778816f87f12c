"""The parser process: ``python -m stages.parsing.child FD`` reads documents for one worker.

A worker's parse stage starts one (:class:`stages.parsing.process.ParserProcess`) and sends
it a :class:`~stages.parsing.wire.ParseRequest` at a time over the socket ``FD``. It reads
the document with PyMuPDF (or a format reader) and streams the pages back, then ``Done``,
or ``Failed`` with the one-line reason. Each document is read under a memory and a CPU
limit (:mod:`stages.parsing.limits`); after one that exceeded its memory, or took the
parser far towards it, the parser says so in its last reply and exits. It imports only
what reading needs, ignores the terminal's SIGINT and SIGTERM (the worker finishes the
document in hand, then closes the socket, which ends this process) and dies with its
worker (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import ctypes
import logging
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

from runtime.api import InvalidDocument, RaglineError
from stages.parsing import limits
from stages.parsing.formats import by_media_type
from stages.parsing.formats.pdf import iter_pages, open_pdf
from stages.parsing.formats.read import read_units
from stages.parsing.formats.unit import Unit
from stages.parsing.wire import (
    Done,
    Failed,
    Log,
    ParseRequest,
    Ready,
    Reply,
    Units,
    receive_request,
    send,
)

#: Text sent back in one message at most (about); a page with images goes at once.
BATCH_CHARS = 256 * 1024
_PR_SET_PDEATHSIG = 1


def read_document(request: ParseRequest) -> Iterator[Unit]:
    """The document's pages (or sections), in order."""
    fmt = by_media_type(request.media_type)
    if fmt is None:
        raise InvalidDocument(f"{request.filename}: unknown media type {request.media_type!r}")
    if fmt.reader != "pdf":
        limits = (request.min_image_px, request.min_image_bytes, request.max_image_pixels)
        yield from read_units(Path(request.path), fmt, request.filename, limits)
        return
    pdf = open_pdf(request.path, name=request.filename)
    try:
        for text, images in iter_pages(
            pdf,
            min_image_px=request.min_image_px,
            min_image_bytes=request.min_image_bytes,
            max_image_pixels=request.max_image_pixels,
            trim_cache_every_pages=request.trim_cache_every_pages,
            layout=request.layout,
        ):
            yield Unit(text.page, text.text, None, images, text.layout)
    finally:
        pdf.close()  # type: ignore[no-untyped-call]


def serve(sock: socket.socket, start_mb: float = 0.0) -> None:
    """Answer requests until the worker closes the socket (an OSError sending means it
    is gone: raised) or a reply retires this parser. ``start_mb``: its address space
    when it was ready."""
    while True:
        try:
            request = receive_request(sock)
        except EOFError:
            return
        for reply in replies(request, start_mb):
            send(sock, reply)
            if isinstance(reply, Done | Failed) and reply.retire:
                return


def replies(request: ParseRequest, start_mb: float = 0.0) -> Iterator[Reply]:
    """The document's pages in batches, then ``Done``; or ``Failed`` for any error while
    reading it (an OSError on its file included: that is the document's, not the
    socket's), read under the request's limits (:mod:`stages.parsing.limits`)."""
    limits.apply(request.memory_mb, request.cpu_s)
    try:
        yield from _batches(read_document(request), request)
    except Exception as exc:
        yield _failed(request, exc, start_mb)
        return
    yield Done(retire=bool(request.memory_mb) and limits.near(request.memory_mb, start_mb, 0.5))


def _batches(units: Iterator[Unit], request: ParseRequest) -> Iterator[Units]:
    """The units in messages of about :data:`BATCH_CHARS`.

    :raises ParseLimitExceeded: past the request's characters of text (``max_chars``).
    """
    batch: list[Unit] = []
    size = total = 0
    for unit in units:
        total += len(unit.text)
        if request.max_chars and total > request.max_chars:
            raise limits.text_exceeded(request.filename, request.max_chars)
        batch.append(unit)
        size += len(unit.text)
        if size >= BATCH_CHARS or unit.images:
            yield Units(batch)
            batch, size = [], 0
    if batch:
        yield Units(batch)


def _failed(request: ParseRequest, exc: Exception, start_mb: float) -> Failed:
    memory = request.memory_mb
    if isinstance(exc, limits.ParseLimitExceeded):
        return Failed(type(exc).__name__, exc.message)
    if memory and (limits.out_of_memory(exc) or limits.near(memory, start_mb, 0.75)):
        exceeded = limits.memory_exceeded(request.filename, memory)
        return Failed(type(exceeded).__name__, exceeded.message, retire=True)
    if isinstance(exc, RaglineError):
        return Failed(type(exc).__name__, exc.message)
    # A library's error on this document: the worker retries.
    return Failed("error", f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)


class _Forward(logging.Handler):
    """Sends each record to the worker, which logs it under the job's context."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self.sock = sock

    def emit(self, record: logging.LogRecord) -> None:
        try:
            send(self.sock, Log(record.levelno, record.name, record.getMessage()))
        except Exception:  # the worker is gone; the next send says so
            self.handleError(record)


def _die_with_parent() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m stages.parsing.child FD (started by a worker)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _die_with_parent()
    sock = socket.socket(fileno=int(argv[1]))
    root = logging.getLogger()
    root.handlers[:] = [_Forward(sock)]
    root.setLevel(logging.INFO)
    limits.no_core_dumps()
    try:
        send(sock, Ready())
        serve(sock, limits.address_space_mb())
    except (OSError, EOFError):
        return 0
    finally:
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
