"""An HTTP/1.1 proxy that misbehaves on cue, between a client and a real server.

It reads each connection's request head and then either forwards the connection byte for
byte (both ways, streams included) or does what a rule says for requests whose request
line starts with the rule's prefix:

- ``answer(503, retry_after="1")``: answers itself, as a load balancer in front of a
  restarting server does, and closes;
- ``cut_request(after_bytes)``: forwards the head and that many bytes of the body, then
  closes both sides (the client's connection broke mid-upload);
- ``drop_response()``: forwards the whole request, and when the server's answer starts,
  closes the client's side instead (the server acted; the client never heard).

One request per connection is what it understands: the client under test keeps no idle
connection (``httpx.Limits(max_keepalive_connections=0)``). Every request line it sees is
kept in :attr:`FaultProxy.seen` with its arrival time.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from dataclasses import dataclass
from http import HTTPStatus
from types import TracebackType


@dataclass
class Rule:
    prefix: str
    action: str
    times: int
    status: int = 503
    retry_after: str | None = None
    after_bytes: int = 0


class FaultProxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._lock = threading.Lock()
        self._rules: list[Rule] = []
        #: (time.monotonic(), request line) of every request, in arrival order.
        self.seen: list[tuple[float, str]] = []
        #: Every request's head (request line and headers), in arrival order.
        self.heads: list[str] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    # -- rules ---------------------------------------------------------------------------

    def answer(
        self, status: int, *, prefix: str = "", retry_after: str | None = None, times: int = 1
    ) -> None:
        self._add(Rule(prefix, "answer", times, status=status, retry_after=retry_after))

    def cut_request(self, after_bytes: int, *, prefix: str = "POST ", times: int = 1) -> None:
        self._add(Rule(prefix, "cut", times, after_bytes=after_bytes))

    def drop_response(self, *, prefix: str = "POST ", times: int = 1) -> None:
        self._add(Rule(prefix, "drop", times))

    def _add(self, rule: Rule) -> None:
        with self._lock:
            self._rules.append(rule)

    def _take(self, head: str) -> Rule | None:
        line = head.split("\r\n", 1)[0]
        with self._lock:
            self.seen.append((time.monotonic(), line))
            self.heads.append(head)
            for rule in self._rules:
                if rule.times > 0 and line.startswith(rule.prefix):
                    rule.times -= 1
                    return rule
        return None

    def lines(self, prefix: str = "") -> list[str]:
        with self._lock:
            return [line for _, line in self.seen if line.startswith(prefix)]

    def header(self, prefix: str, name: str) -> list[str | None]:
        """Header ``name``'s value in each request whose line starts with ``prefix``."""
        with self._lock:
            heads = [h for h in self.heads if h.startswith(prefix)]
        return [_header_of(h, name) for h in heads]

    # -- connections ---------------------------------------------------------------------

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with contextlib.closing(client):
            head, rest = _read_head(client)
            if not head:
                return
            rule = self._take(head.decode("latin-1"))
            if rule is not None and rule.action == "answer":
                client.sendall(_canned(rule))
                return
            with contextlib.closing(socket.create_connection(self.target, timeout=30)) as up:
                up.settimeout(None)
                if rule is not None and rule.action == "cut":
                    _send_cut(client, up, head + rest, rule.after_bytes)
                    return
                up.sendall(head + rest)
                if rule is not None and rule.action == "drop":
                    _drop(client, up)
                    return
                _pump_both(client, up)

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _header_of(head: str, name: str) -> str | None:
    for line in head.split("\r\n")[1:]:
        key, _, value = line.partition(":")
        if key.strip().lower() == name.lower():
            return value.strip()
    return None


def _read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return b"", b""
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head + b"\r\n\r\n", rest


def _canned(rule: Rule) -> bytes:
    phrase = HTTPStatus(rule.status).phrase
    body = json.dumps(
        {
            "type": "about:blank",
            "title": phrase,
            "status": rule.status,
            "detail": "proxy says later",
        }
    ).encode()
    lines = [
        f"HTTP/1.1 {rule.status} {phrase}",
        "Content-Type: application/problem+json",
        f"Content-Length: {len(body)}",
        "Connection: close",
    ]
    if rule.retry_after is not None:
        lines.append(f"Retry-After: {rule.retry_after}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _send_cut(client: socket.socket, up: socket.socket, first: bytes, after_bytes: int) -> None:
    """Forward the head and ``after_bytes`` of the body, then close both sides."""
    head_len = first.index(b"\r\n\r\n") + 4
    budget = head_len + after_bytes
    sent = first[:budget]
    up.sendall(sent)
    while len(sent) < budget:
        chunk = client.recv(min(65536, budget - len(sent)))
        if not chunk:
            break
        up.sendall(chunk)
        sent += chunk
    for s in (up, client):
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)


def _drop(client: socket.socket, up: socket.socket) -> None:
    """Forward the request's body; close the client's side once the server answers."""
    stop = threading.Event()
    threading.Thread(target=_pump, args=(client, up, stop), daemon=True).start()
    up.recv(1)  # the server's answer has begun: it acted on the whole request
    stop.set()
    with contextlib.suppress(OSError):
        client.shutdown(socket.SHUT_RDWR)


def _pump_both(client: socket.socket, up: socket.socket) -> None:
    threading.Thread(target=_pump, args=(client, up), daemon=True).start()
    _pump(up, client)


def _pump(src: socket.socket, dst: socket.socket, stop: threading.Event | None = None) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            if stop is not None and stop.is_set():
                return
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)
