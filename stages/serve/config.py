"""The server's configuration: one frozen struct, from flags and ``RAGLINE_*`` variables."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import msgspec

from runtime.api import ConfigurationError
from stages.actions.metadata import check_principals

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
    #: ``RAGLINE_API_TOKENS``'s entries, ``TOKEN`` or ``TOKEN:principal+principal``
    #: (:func:`api_tokens`); empty: no authentication (only allowed on localhost).
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
        api_tokens(self.tokens)  # a bad entry is one line before anything starts
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


class ApiToken(msgspec.Struct, frozen=True):
    """A bearer token and the principals its caller holds (None: a caller who may read
    every document, as a token was before principals existed)."""

    secret: str
    principals: tuple[str, ...] | None = None


def api_tokens(entries: tuple[str, ...]) -> tuple[ApiToken, ...]:
    """``TOKEN`` or ``TOKEN:principal+principal`` per entry (the first ``:`` splits); one
    line for an entry without a token, a ``:`` without principals, a bad principal name
    or a token given twice."""
    out: dict[str, ApiToken] = {}
    for entry in entries:
        secret, colon, names = entry.partition(":")
        if not secret:
            raise ConfigurationError("RAGLINE_API_TOKENS: an entry has no token before ':'")
        if secret in out:
            raise ConfigurationError("RAGLINE_API_TOKENS: a token is listed twice")
        principals = None
        if colon:
            given = names.split("+")
            if not all(given):
                raise ConfigurationError(
                    "RAGLINE_API_TOKENS: after ':' come principals joined by '+', none empty"
                )
            try:
                principals = check_principals(given)
            except ConfigurationError:  # the name only: the entry holds the token
                raise ConfigurationError(
                    "RAGLINE_API_TOKENS: principals are 1-128 letters, digits or _.@- joined by '+'"
                ) from None
        out[secret] = ApiToken(secret, principals)
    return tuple(out.values())
