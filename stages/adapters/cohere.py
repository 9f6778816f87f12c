"""Cohere SDK plumbing shared by :mod:`stages.adapters.embedder.cohere` and
:mod:`stages.adapters.vision.cohere`.

:func:`make_client` builds the SDK client with its own retries switched off
(``max_retries=0``), so every failure surfaces once and the worker's retry policy (backoff,
jitter, ``max_attempts``, Retry-After) is the only one in force; :class:`CohereAdapter`,
the adapters' base, holds that client; :func:`translated` turns the SDK's exceptions into
ragline's error classes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import cohere
import httpx
import msgspec
from cohere.core.api_error import ApiError

from runtime.api import (
    PermanentError,
    RateLimited,
    StageError,
    TransientError,
    one_line,
    parse_retry_after,
)

#: Statuses that mean "try again later" besides 429 and the 5xx range.
_TRANSIENT_4XX = frozenset({408})


def cohere_knobs(settings: msgspec.Struct) -> dict[str, Any]:
    """``settings`` (``EmbedSettings`` or ``VisionSettings``) as keyword arguments of the
    adapter's config: every field but ``kind``, less the unset ones (None, or an empty
    value), which keep the config's defaults."""
    knobs = msgspec.structs.asdict(settings)
    del knobs["kind"]
    return {name: value for name, value in knobs.items() if value}


def make_client(
    api_key: str, base_url: str | None, timeout_s: float
) -> tuple[cohere.AsyncClientV2, httpx.AsyncClient]:
    """An SDK client that never retries, and the HTTP client it runs on (ours to close)."""
    http = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s))
    client = cohere.AsyncClientV2(
        api_key=api_key,
        base_url=base_url,
        timeout=timeout_s,
        max_retries=0,
        httpx_client=http,
    )
    return client, http


class CohereAdapter:
    """What the Cohere adapters share: the SDK client of :func:`make_client` (the worker
    owns retries), closed by :meth:`aclose`; every call counts against a provider's quota
    (``RAGLINE_EMBED_RPM``, ``RAGLINE_VISION_RPM``)."""

    metered = True

    def __init__(self, api_key: str, base_url: str | None, timeout_s: float) -> None:
        self._client, self._http = make_client(api_key, base_url, timeout_s)

    async def aclose(self) -> None:
        await self._http.aclose()


@contextlib.contextmanager
def translated(op: str) -> Iterator[None]:
    """Re-raise SDK and transport errors raised inside the block as ragline errors.

    ``op`` prefixes the one-line message, e.g. ``"cohere embed"``. Anything that is not a
    vendor error (a bug, a cancellation) passes through untouched.
    """
    try:
        yield
    except ApiError as exc:
        raise from_api_error(op, exc) from exc
    except httpx.TimeoutException as exc:
        raise TransientError(f"{op}: timed out ({type(exc).__name__})") from exc
    except httpx.HTTPError as exc:
        # Connection refused or reset, a server that hung up mid-response, DNS failures:
        # nothing says the request itself was bad, so it is worth another try.
        raise TransientError(one_line(f"{op}: {_transport_detail(exc)}")) from exc


def _transport_detail(exc: httpx.HTTPError) -> str:
    detail = str(exc).strip()
    kind = type(exc).__name__
    return f"connection failed ({kind}: {detail})" if detail else f"connection failed ({kind})"


def from_api_error(op: str, exc: ApiError) -> StageError:
    """Map an HTTP-level SDK error to Transient, RateLimited or Permanent."""
    status = exc.status_code
    message = one_line(f"{op}: HTTP {status}: {error_detail(exc.body)}")
    if status == 429:
        return RateLimited(message, retry_after_s=retry_after_s(exc.headers))
    if status is None or status >= 500 or status in _TRANSIENT_4XX:
        return TransientError(message)
    if 200 <= status < 300:
        # A 2xx the SDK could not parse: a proxy's HTML page or a truncated body.
        return TransientError(one_line(f"{op}: unparseable HTTP {status} response"))
    return PermanentError(message)


def error_detail(body: Any) -> str:
    """The human part of an error body: Cohere sends ``{"message": "..."}``."""
    if isinstance(body, Mapping):
        for key in ("message", "detail", "error"):
            if isinstance(body.get(key), str):
                return str(body[key])
    if body is None or body == "":
        return "no detail"
    return str(body)


def retry_after_s(headers: Mapping[str, str] | None, *, now_s: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP-date)."""
    return parse_retry_after(_header(headers, "retry-after"), now_s=now_s)


def _header(headers: Mapping[str, str] | None, name: str) -> str | None:
    if not headers:
        return None
    for key, value in headers.items():
        if key.lower() == name:
            return value.strip()
    return None
