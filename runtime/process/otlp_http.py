"""OTLP/HTTP for the exporter process: request bodies that
:mod:`runtime.process.otlp_encoder` built, POSTed as the SDK's OTLP/HTTP span exporter
posts its own (docs/tracing.md).

The same variables, read the same way: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` as given,
else ``OTEL_EXPORTER_OTLP_ENDPOINT`` (default ``http://localhost:4318``) plus
``/v1/traces``; the ``..._HEADERS`` (W3C-baggage-style, read liberally), ``..._COMPRESSION``
(gzip, deflate, none), ``..._TIMEOUT`` (seconds, the whole export's budget), and the
``..._CERTIFICATE``, ``..._CLIENT_CERTIFICATE``, ``..._CLIENT_KEY`` files; each traces
variable before the general one. Failures are retried as the SDK retries them (the OTLP
specification's retryable answers 429, 502, 503 and 504, and connection errors, up to six
attempts, backing off 1, 2, 4, ... s with 20% jitter or as ``Retry-After`` says, within
the timeout); then the batch is dropped with one log line. Nothing raises out of
:meth:`OtlpHttp.export`: the exporting loop goes on with the next batch.
"""

from __future__ import annotations

import gzip
import logging
import random
import ssl
import time
import zlib
from collections.abc import Callable, Mapping
from typing import Final

import httpx
from opentelemetry.util.re import parse_env_headers

from runtime.providers.backoff import parse_retry_after

log = logging.getLogger("ragline.span_exporter")

DEFAULT_ENDPOINT: Final = "http://localhost:4318"
TRACES_PATH: Final = "v1/traces"
DEFAULT_TIMEOUT_S: Final = 10.0
MAX_ATTEMPTS: Final = 6
JITTER: Final = 0.2
RETRYABLE: Final = frozenset({429, 502, 503, 504})
#: The SDK exporter's limit on a request before compression (64 MiB): a larger batch is
#: dropped, not sent.
MAX_REQUEST_BYTES: Final = 64 << 20
USER_AGENT: Final = "ragline-otlp-exporter"
#: Env lookups: the traces variable, else the general one.
_TRACES, _ALL = "OTEL_EXPORTER_OTLP_TRACES_", "OTEL_EXPORTER_OTLP_"


def setting(env: Mapping[str, str], name: str) -> str | None:
    """``OTEL_EXPORTER_OTLP_TRACES_<name>``, else ``OTEL_EXPORTER_OTLP_<name>`` (an empty
    value counts as unset, as in the SDK)."""
    return env.get(_TRACES + name) or env.get(_ALL + name) or None


def endpoint(env: Mapping[str, str]) -> str:
    given = env.get(_TRACES + "ENDPOINT")
    if given:
        return given
    base = env.get(_ALL + "ENDPOINT") or DEFAULT_ENDPOINT
    return f"{base.removesuffix('/')}/{TRACES_PATH}"


def compression(env: Mapping[str, str]) -> str:
    """``gzip``, ``deflate`` or ``none`` (anything else: none, with a warning)."""
    value = (setting(env, "COMPRESSION") or "none").strip().lower()
    if value not in ("gzip", "deflate", "none"):
        log.warning("tracing: unsupported OTLP compression %r; sending uncompressed", value)
        return "none"
    return value


def timeout_s(env: Mapping[str, str]) -> float:
    raw = setting(env, "TIMEOUT")
    if raw is None:
        return DEFAULT_TIMEOUT_S
    try:
        return float(raw)
    except ValueError:
        log.warning("tracing: invalid OTLP timeout %r; using %g s", raw, DEFAULT_TIMEOUT_S)
        return DEFAULT_TIMEOUT_S


def headers(env: Mapping[str, str], compressed: str) -> dict[str, str]:
    """The request's headers: protobuf's content type, the configured ones (lower-cased
    names), and the content encoding unless they name one."""
    out = {"content-type": "application/x-protobuf", "user-agent": USER_AGENT}
    out.update(parse_env_headers(setting(env, "HEADERS") or "", liberal=True))
    if compressed != "none" and "content-encoding" not in out:
        out["content-encoding"] = compressed
    return out


def tls(env: Mapping[str, str]) -> ssl.SSLContext | bool:
    """Verification against ``..._CERTIFICATE`` (else the system's), and the client's
    certificate when ``..._CLIENT_CERTIFICATE`` is set (with ``..._CLIENT_KEY``, or the
    key inside it)."""
    ca = setting(env, "CERTIFICATE")
    client = setting(env, "CLIENT_CERTIFICATE")
    if ca is None and client is None:
        return True
    context = ssl.create_default_context(cafile=ca)
    if client is not None:
        context.load_cert_chain(client, setting(env, "CLIENT_KEY"))
    return context


#: ``Retry-After`` in seconds (the engine's one reader of that header).
retry_after_s = parse_retry_after


def _compressor(kind: str) -> Callable[[bytes], bytes]:
    if kind == "gzip":
        return gzip.compress
    if kind == "deflate":
        return zlib.compress
    return bytes


class OtlpHttp:
    """One endpoint's client: a kept-alive connection, the settings read once."""

    def __init__(self, env: Mapping[str, str], sleep: Callable[[float], None] = time.sleep):
        self.url = endpoint(env)
        self.compression = compression(env)
        self.timeout_s = timeout_s(env)
        self.headers = headers(env, self.compression)
        self._compress = _compressor(self.compression)
        self._sleep = sleep
        self.client = httpx.Client(verify=tls(env), timeout=self.timeout_s, trust_env=True)

    def export(self, body: bytes, spans: int) -> bool:
        """POST one request body of ``spans`` spans, retrying what may pass later; False
        (and one log line) when the batch is dropped."""
        try:
            return self._export(body, spans)
        except Exception as exc:  # never into the exporting loop
            log.error("tracing: exporting %d spans failed: %s", spans, exc)
            return False

    def _export(self, body: bytes, spans: int) -> bool:
        if len(body) > MAX_REQUEST_BYTES:
            log.warning(
                "tracing: dropping %d spans: the request is %d bytes, over the OTLP "
                "exporter's %d (lower OTEL_BSP_MAX_EXPORT_BATCH_SIZE)",
                spans,
                len(body),
                MAX_REQUEST_BYTES,
            )
            return False
        data = self._compress(body)
        deadline = time.monotonic() + self.timeout_s
        why = "no attempt"
        for attempt in range(MAX_ATTEMPTS):
            backoff = 2**attempt * random.uniform(1 - JITTER, 1 + JITTER)
            try:
                answer = self._post(data, deadline)
            except httpx.TransportError as exc:
                why = f"{type(exc).__name__}: {exc}"
            else:
                if answer.status_code < 400:
                    return True
                why = f"HTTP {answer.status_code} {answer.reason_phrase}"
                if answer.status_code not in RETRYABLE:
                    break
                after = retry_after_s(answer.headers.get("retry-after"))
                backoff = backoff if after is None else after
            if attempt + 1 == MAX_ATTEMPTS or backoff > deadline - time.monotonic():
                break
            self._sleep(backoff)
        log.error("tracing: dropped %d spans: the OTLP endpoint answered %s", spans, why)
        return False

    def _post(self, data: bytes, deadline: float) -> httpx.Response:
        """One POST; a connection error is tried again at once (a pooled connection the
        server had closed), as the SDK does."""
        try:
            return self._send(data, deadline)
        except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError):
            if deadline <= time.monotonic():
                raise
            return self._send(data, deadline)

    def _send(self, data: bytes, deadline: float) -> httpx.Response:
        timeout = max(deadline - time.monotonic(), 0.001)
        answer = self.client.post(self.url, content=data, headers=self.headers, timeout=timeout)
        answer.read()
        return answer

    def shutdown(self) -> None:
        self.client.close()
