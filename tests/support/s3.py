"""A local S3 server (moto) on 127.0.0.1 for asset-store tests."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import msgspec
import pytest
from moto.server import ThreadedMotoServer


class S3Server(msgspec.Struct, frozen=True):
    """Where the moto server listens and the credentials it accepts."""

    endpoint: str
    access_key: str = "testing"
    secret_key: str = "testing"


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """A moto S3 server on an ephemeral loopback port, for the whole session."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield S3Server(endpoint=f"{host}:{port}")
    finally:
        server.stop()


def closed_port() -> int:
    """A loopback port with nothing listening on it (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
