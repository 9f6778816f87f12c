"""The parse stage's parser process: PyMuPDF runs in a child of the worker, not in it.

PyMuPDF holds the GIL while MuPDF reads a page, so in the worker parsing would take turns
with chunking, indexing and the event loop; the child (``python -m stages.parsing.child``)
runs beside them, keeps MuPDF's memory out of the worker, and turns a crash in MuPDF into
one failed attempt (:class:`ParserDied`). One :class:`ParserProcess` per worker process,
one document at a time, stopped by :meth:`aclose`; the worker waits for its
:class:`~stages.parsing.wire.Ready` (:meth:`wait_ready`) before its first claim. A parser
left idle for :data:`IDLE_STOP_S` stops, and the next document starts another. Why, and
the figures: docs/architecture.md, "Throughput and latency".
"""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

import anyio.to_thread

from runtime.api import InvalidDocument, MissingInput, PermanentError
from stages.parsing.formats.unit import Unit
from stages.parsing.limits import ParseLimitExceeded, cpu_exceeded
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

__all__ = ["ParseLimitExceeded", "ParserDied", "ParserProcess"]

T = TypeVar("T")

#: How long a stopping parser may take to exit once its socket is closed.
STOP_TIMEOUT_S = 5.0
#: How long a starting parser may take to say it is ready.
READY_TIMEOUT_S = 60.0
_KNOWN = {
    e.__name__: e for e in (InvalidDocument, MissingInput, PermanentError, ParseLimitExceeded)
}


class ParserDied(RuntimeError):
    """The parser process exited while reading a document (counted as an attempt)."""


#: How a worker starts its parser.
CHILD_COMMAND = (sys.executable, "-m", "stages.parsing.child")
#: A parser this long without a document stops. Between batches of documents it would
#: hold its imports and heap (55-62 MB) beside the worker's models while they describe
#: and embed what it read; starting another takes ~0.4 s of CPU. On bench.default_path's
#: slice ingest's peak came 35-42 s in, some 15-20 s after the last document was
#: parsed: with 20 s the parser was still there at it, with 10 s not
#: (docs/performance.md).
IDLE_STOP_S = 10.0


class ParserProcess:
    def __init__(
        self,
        command: Sequence[str] = CHILD_COMMAND,
        cwd: str | None = None,
        idle_stop_s: float | None = IDLE_STOP_S,
    ) -> None:
        """``command`` (and ``cwd``): another parser to start, such as an older tree's
        (``bench/bombs.py --baseline``); the socket's descriptor is its last argument.
        ``idle_stop_s``: stop a parser left that long without a document (None: never)."""
        self._command = tuple(command)
        self._cwd = cwd
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._ready = False
        self._idle_stop_s = idle_stop_s
        #: Documents asked for so far: an idle timer armed after the n-th stops the
        #: parser only if no other came since.
        self._asked = 0
        self._idle_timer: threading.Timer | None = None

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
            self._stop_when_idle()

    def parse(self, request: ParseRequest, take: Callable[[Unit], None]) -> None:
        """Read one document, handing each page (or section) to ``take`` in order.
        Blocking: call it from a worker thread.

        :raises InvalidDocument, MissingInput, PermanentError: as the readers raise them.
        :raises ParseLimitExceeded: the document needs more memory or CPU time than the
            request allows (the next document gets a new parser).
        :raises ParserDied: the parser process exited meanwhile.
        """
        with self._lock:
            self._asked += 1
            try:
                failed = self._converse(request, take)
            finally:
                self._stop_when_idle()
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
            if isinstance(reply, Done | Failed):
                if reply.retire:
                    self._reap()  # it exits after this reply; the next document starts one
                return reply if isinstance(reply, Failed) else None
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

    def _stop_when_idle(self) -> None:
        """Arm the idle timer: the parser stops unless another document comes first."""
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        if self._idle_stop_s is None or self._sock is None:
            return
        self._idle_timer = threading.Timer(self._idle_stop_s, self._idle, (self._asked,))
        self._idle_timer.daemon = True
        self._idle_timer.start()

    def _idle(self, asked: int) -> None:
        with self._lock:
            if asked == self._asked:
                self._reap()  # between documents: it exits on EOF

    def _io(self, request: ParseRequest, call: Callable[[], T]) -> T:
        try:
            return call()
        except (EOFError, OSError):
            code = self._reap()
        if code == -signal.SIGXCPU and request.cpu_s:
            # The kernel's signal at the CPU limit set for this document: its own failure.
            raise cpu_exceeded(request.filename, request.cpu_s)
        raise ParserDied(f"{request.filename}: the parser process {_ended(code)} while reading it")

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self.close)

    def close(self) -> None:
        with self._lock:
            if self._idle_timer is not None:
                self._idle_timer.cancel()
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
            how = _ended(self._reap())
            raise ParserDied(f"the parser process {how} before it was ready") from None
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
                [*self._command, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                cwd=self._cwd,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._sock = ours
        return ours

    def _reap(self, *, kill: bool = False) -> int | None:
        """Stop the parser (if any); its exit status (None: none was running)."""
        sock, proc = self._sock, self._proc
        self._sock = self._proc = None
        if sock is not None:
            sock.close()  # a parser between documents exits on EOF
        if proc is None:
            return None
        if kill:
            proc.kill()
        try:
            code = proc.wait(timeout=STOP_TIMEOUT_S if proc.poll() is None else None)
        except subprocess.TimeoutExpired:
            proc.kill()  # busy with a document nobody waits for any more
            code = proc.wait()
        return code


def _ended(code: int | None) -> str:
    """How a parser ended, for messages."""
    if code is None:
        return "was not running"
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
