"""The server's configuration: one frozen struct, from flags and ``RAGLINE_*`` variables."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import msgspec

from runtime.api import ConfigurationError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8800
#: Uploads larger than this are refused with 413 (a PDF that size is rare; raise it freely:
#: the server's memory does not grow with the upload).
DEFAULT_MAX_UPLOAD_MB = 512
#: Seconds between SSE heartbeat comments (proxies close streams idle for ~60 s).
DEFAULT_SSE_HEARTBEAT_S = 15.0
_LOCAL_NAMES = {"localhost", "ip6-localhost"}


class ServeConfig(msgspec.Struct, frozen=True, kw_only=True):
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    #: Bearer tokens accepted; empty: no authentication (only allowed on localhost).
    tokens: tuple[str, ...] = ()
    max_upload_mb: int = DEFAULT_MAX_UPLOAD_MB
    #: Origins allowed by CORS (and trusted to write); empty: CORS off.
    cors_origins: tuple[str, ...] = ()
    #: Host names the server answers (``Host`` header); empty: the bound address and, on a
    #: loopback address, the loopback names; ``*``: any.
    allowed_hosts: tuple[str, ...] = ()
    sse_heartbeat_s: float = DEFAULT_SSE_HEARTBEAT_S
    #: Where uploads are spooled while they stream in (deleted once stored).
    upload_dir: Path = Path(".ragline/uploads")

    @property
    def max_upload_bytes(self) -> int:
        return self.max_upload_mb * 1024 * 1024

    def __post_init__(self) -> None:
        if self.max_upload_mb < 1:
            raise ConfigurationError("RAGLINE_MAX_UPLOAD_MB must be at least 1")
        if not self.tokens and not is_loopback(self.host):
            raise ConfigurationError(
                f"refusing to serve on {self.host} without RAGLINE_API_TOKENS: anyone who "
                "can reach it could upload and delete documents; set tokens or bind 127.0.0.1"
            )


def is_loopback(host: str) -> bool:
    if host in _LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_tokens(raw: str | None) -> tuple[str, ...]:
    """Comma-separated tokens; blanks dropped."""
    return tuple(t.strip() for t in (raw or "").split(",") if t.strip())
