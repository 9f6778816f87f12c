"""A local S3 server (moto) on 127.0.0.1 for asset-store tests."""

from __future__ import annotations

import socket

import msgspec


class S3Server(msgspec.Struct, frozen=True):
    """Where the moto server listens and the credentials it accepts."""

    endpoint: str
    access_key: str = "testing"
    secret_key: str = "testing"


def closed_port() -> int:
    """A loopback port with nothing listening on it (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
