"""A TCP proxy a test can cut: the database "goes away" for the processes behind it.

``with TcpProxy(("127.0.0.1", 5432)) as proxy:`` forwards ``proxy.port`` to the target;
``proxy.cut()`` closes every connection and refuses new ones (as a dead server does).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType


class TcpProxy:
    def __init__(self, target: tuple[str, int]) -> None:
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
                upstream = socket.create_connection(self.target, timeout=10)
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

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cut()
