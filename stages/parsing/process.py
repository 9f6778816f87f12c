"""The parse stage's parser process: PyMuPDF runs in a child of the worker, not in it.

PyMuPDF holds the GIL while MuPDF reads a page, so in the worker parsing would take turns
with chunking, indexing and the event loop; the child (``python -m stages.parsing.child``)
runs beside them, keeps MuPDF's memory out of the worker, and turns a crash in MuPDF into
one failed attempt (:class:`ParserDied`). One :class:`ParserProcess` per worker process,
one document at a time, stopped by :meth:`aclose`; the worker waits for its
:class:`~stages.parsing.wire.Ready` (:meth:`wait_ready`) before its first claim. Why, and
the figures: docs/architecture.md, "Throughput and latency".
"""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

import anyio.to_thread

from runtime.api import InvalidDocument, MissingInput, PermanentError
from stages.parsing.formats.unit import Unit
from stages.parsing.wire import (
    Done,
    Failed,
    Log,
    ParseRequest,
    Ready,
    Units,
    receive_reply,
    send,
)

__all__ = ["ParserDied", "ParserProcess"]

T = TypeVar("T")

#: How long a stopping parser may take to exit once its socket is closed.
STOP_TIMEOUT_S = 5.0
#: How long a starting parser may take to say it is ready.
READY_TIMEOUT_S = 60.0
_KNOWN = {e.__name__: e for e in (InvalidDocument, MissingInput, PermanentError)}


class ParserDied(RuntimeError):
    """The parser process exited while reading a document (counted as an attempt)."""


class ParserProcess:
    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._ready = False

    @property
    def pid(self) -> int | None:
        """The running parser's process id (None before it starts)."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def start(self) -> None:
        """Start the parser if it is not running (it imports PyMuPDF meanwhile)."""
        with self._lock:
            self._started()

    def wait_ready(self) -> None:
        """Start the parser if it is not running and wait until it is ready. Blocking.

        :raises ParserDied: it exited (or hung) before it was ready; the message says how.
        """
        with self._lock:
            self._ready_socket()

    def parse(self, request: ParseRequest, take: Callable[[Unit], None]) -> None:
        """Read one document, handing each page (or section) to ``take`` in order.
        Blocking: call it from a worker thread.

        :raises InvalidDocument, MissingInput, PermanentError: as the readers raise them.
        :raises ParserDied: the parser process exited meanwhile.
        """
        with self._lock:
            failed = self._converse(request, take)
        if failed is not None:
            raise _error(failed)

    def _converse(self, request: ParseRequest, take: Callable[[Unit], None]) -> Failed | None:
        try:
            sock = self._ready_socket()
        except ParserDied as exc:
            raise ParserDied(f"{request.filename}: {exc}") from None
        self._io(request, lambda: send(sock, request))
        while True:
            reply = self._io(request, lambda: receive_reply(sock))
            if isinstance(reply, Done):
                return None
            if isinstance(reply, Failed):
                return reply
            if isinstance(reply, Log):
                logging.getLogger(reply.logger).log(reply.level, "%s", reply.message)
                continue
            assert isinstance(reply, Units)
            try:
                for unit in reply.units:
                    take(unit)
            except BaseException:
                # Mid-document the parser is still sending: a fresh one starts for the
                # next document.
                self._reap(kill=True)
                raise

    def _io(self, request: ParseRequest, call: Callable[[], T]) -> T:
        try:
            return call()
        except (EOFError, OSError):
            how = self._reap()
            raise ParserDied(
                f"{request.filename}: the parser process {how} while reading it"
            ) from None

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self.close)

    def close(self) -> None:
        with self._lock:
            self._reap()

    def _ready_socket(self) -> socket.socket:
        """The running parser's socket, once it has said it is ready."""
        sock = self._started()
        if self._ready:
            return sock
        sock.settimeout(READY_TIMEOUT_S)
        try:
            reply = receive_reply(sock)
        except TimeoutError:
            self._reap(kill=True)
            raise ParserDied(
                f"the parser process did not start within {READY_TIMEOUT_S:.0f} s"
            ) from None
        except (EOFError, OSError):
            raise ParserDied(f"the parser process {self._reap()} before it was ready") from None
        if not isinstance(reply, Ready):
            self._reap(kill=True)
            raise ParserDied(f"the parser process said {type(reply).__name__} before it was ready")
        sock.settimeout(None)
        self._ready = True
        return sock

    def _started(self) -> socket.socket:
        if self._sock is not None and self.pid is not None:
            return self._sock
        self._reap()
        self._ready = False
        ours, theirs = socket.socketpair()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "stages.parsing.child", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._sock = ours
        return ours

    def _reap(self, *, kill: bool = False) -> str:
        """Stop the parser (if any); how it ended, for messages."""
        sock, proc = self._sock, self._proc
        self._sock = self._proc = None
        if sock is not None:
            sock.close()  # a parser between documents exits on EOF
        if proc is None:
            return "was not running"
        if kill:
            proc.kill()
        try:
            code = proc.wait(timeout=STOP_TIMEOUT_S if proc.poll() is None else None)
        except subprocess.TimeoutExpired:
            proc.kill()  # busy with a document nobody waits for any more
            code = proc.wait()
        return _ended(code)


def _ended(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def _error(failed: Failed) -> Exception:
    known = _KNOWN.get(failed.kind)
    if known is not None:
        return known(failed.message)
    return RuntimeError(failed.message)
