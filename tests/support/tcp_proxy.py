"""A TCP proxy a test can cut: the database "goes away" for the processes behind it.

``with TcpProxy(("127.0.0.1", 5432)) as proxy:`` forwards ``proxy.port`` to the target;
``proxy.cut()`` closes every connection and refuses new ones (as a dead server does);
``proxy.resume()`` listens on the same port again (the server is back);
``proxy.lose_reply_after(b"COMMIT")``: the next message holding those bytes reaches the
server, and its reply never reaches the client, whose connection is closed (a commit that
happened, its answer lost). The target may
be a Unix socket's path (the embedded PostgreSQL's): :func:`upstream` gives a DSN's
target, :func:`through` the DSN that connects through the proxy.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

#: A TCP address, or a Unix socket's path.
Target = tuple[str, int] | str


class TcpProxy:
    def __init__(self, target: Target) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._cut = False
        self._lose_after: bytes | None = None
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed by cut()
            try:
                upstream = _connect(self.target)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._cut:
                    client.close()
                    upstream.close()
                    return
                self._sockets += [client, upstream]
            lost = threading.Event()  # this link's client lost a reply
            threading.Thread(target=self._up, args=(client, upstream, lost), daemon=True).start()
            threading.Thread(target=self._down, args=(upstream, client, lost), daemon=True).start()

    def lose_reply_after(self, marker: bytes) -> None:
        """The next message from a client holding ``marker`` goes through; its reply is
        dropped and that client's connection closed."""
        self._lose_after = marker

    def _up(self, client: socket.socket, upstream: socket.socket, lost: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                marker = self._take_marker(data)
                if marker:
                    lost.set()  # before the server can answer
                upstream.sendall(data)
                if marker:
                    client.shutdown(socket.SHUT_RDWR)  # the client sees its connection go
                    return
        with contextlib.suppress(OSError):
            upstream.shutdown(socket.SHUT_WR)

    def _take_marker(self, data: bytes) -> bool:
        with self._lock:
            if self._lose_after is not None and self._lose_after in data:
                self._lose_after = None
                return True
            return False

    @staticmethod
    def _down(upstream: socket.socket, client: socket.socket, lost: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := upstream.recv(65536):
                if lost.is_set():
                    upstream.shutdown(socket.SHUT_RDWR)  # the reply came: drop it, hang up
                    return
                client.sendall(data)
        with contextlib.suppress(OSError):
            client.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        """Close every connection and stop listening: new connects are refused."""
        with self._lock:
            self._cut = True
            sockets, self._sockets = self._sockets, []
        self._listener.close()
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def resume(self) -> None:
        """Listen on the same port again after :meth:`cut`."""
        with self._lock:
            if not self._cut:
                return
            self._listener = socket.create_server(("127.0.0.1", self.port))
            self._cut = False
        threading.Thread(target=self._accept, daemon=True).start()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cut()


def _connect(target: Target) -> socket.socket:
    if isinstance(target, tuple):
        return socket.create_connection(target, timeout=10)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(10)
        sock.connect(target)
    except OSError:
        sock.close()
        raise
    return sock


def upstream(dsn: str) -> Target:
    """Where ``dsn``'s PostgreSQL listens: its host and port, or (a DSN with
    ``?host=/dir&port=N``, as the embedded PostgreSQL's) its Unix socket."""
    parts = urlsplit(dsn)
    if parts.hostname:
        return parts.hostname, parts.port or 5432
    query = dict(parse_qsl(parts.query))
    return f"{query['host']}/.s.PGSQL.{query.get('port', '5432')}"


def through(proxy: TcpProxy, dsn: str, *, tls: bool = True) -> str:
    """``dsn`` with its host and port those of ``proxy`` (a socket's dropped); without
    ``tls``, never encrypted, so that the proxy can read the statements it carries."""
    parts = urlsplit(dsn)
    host = f"127.0.0.1:{proxy.port}"
    netloc = f"{parts.username}@{host}" if parts.username else host
    query = [(k, v) for k, v in parse_qsl(parts.query) if k not in ("host", "port")]
    if not tls:
        query = [(k, v) for k, v in query if k != "sslmode"] + [("sslmode", "disable")]
    return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query)))
