"""A TCP proxy a test can cut: the database "goes away" for the processes behind it.

``with TcpProxy(("127.0.0.1", 5432)) as proxy:`` forwards ``proxy.port`` to the target;
``proxy.cut()`` closes every connection and refuses new ones (as a dead server does);
``proxy.resume()`` listens on the same port again (the server is back). The target may
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
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

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


def through(proxy: TcpProxy, dsn: str) -> str:
    """``dsn`` with its host and port those of ``proxy`` (a socket's dropped)."""
    parts = urlsplit(dsn)
    host = f"127.0.0.1:{proxy.port}"
    netloc = f"{parts.username}@{host}" if parts.username else host
    query = [(k, v) for k, v in parse_qsl(parts.query) if k not in ("host", "port")]
    return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query)))
