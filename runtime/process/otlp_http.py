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

A plain ``http://`` endpoint that no proxy variable applies to (a collector or agent
beside the process, the common case) is posted to over one kept-alive
``http.client`` connection: a third of httpx's CPU a request, and httpx is not even
imported. HTTPS and proxied endpoints go through httpx (its proxies from the
environment, its certificate store), as before.
"""

from __future__ import annotations

import gzip
import http.client
import logging
import random
import ssl
import time
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final, NamedTuple, Protocol

from opentelemetry.util.re import parse_env_headers

if TYPE_CHECKING:
    import httpx

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


class Answer(NamedTuple):
    """What the endpoint answered: enough to decide on a retry."""

    status: int
    reason: str
    retry_after: str | None


class Unsent(Exception):
    """The request got no answer (no connection, a reset, a timeout): retryable."""


class Transport(Protocol):
    def post(self, data: bytes, headers: Mapping[str, str], timeout_s: float) -> Answer:
        """POST ``data``; raises :class:`Unsent` when no answer came."""
        ...

    def close(self) -> None: ...


def plain_http(url: str) -> bool:
    """Whether ``url`` is ``http://`` with no proxy variable applying to it (the proxies
    httpx would read from the environment)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        return False
    proxies = urllib.request.getproxies_environment()
    if not (proxies.get("http") or proxies.get("all")):
        return True
    return bool(urllib.request.proxy_bypass(parts.hostname))


class KeptConnection:
    """One ``http.client`` connection to a plain-HTTP endpoint, kept alive between
    requests and opened again when the server closed it."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        self.target = parts.path or "/"
        if parts.query:
            self.target += "?" + parts.query
        self.connection = http.client.HTTPConnection(parts.hostname or "", parts.port)

    def post(self, data: bytes, headers: Mapping[str, str], timeout_s: float) -> Answer:
        """One POST; when the connection fails (a kept-alive one the server had closed)
        it is tried again at once on a new one, as the SDK does; not after a timeout."""
        try:
            return self._exchange(data, headers, timeout_s)
        except TimeoutError as exc:
            raise self._failed(exc) from exc
        except (OSError, http.client.HTTPException):
            self.connection.close()
        try:
            return self._exchange(data, headers, timeout_s)
        except (OSError, http.client.HTTPException) as exc:
            raise self._failed(exc) from exc

    def _exchange(self, data: bytes, headers: Mapping[str, str], timeout_s: float) -> Answer:
        connection = self.connection
        connection.timeout = timeout_s
        if connection.sock is not None:
            connection.sock.settimeout(timeout_s)
        connection.request("POST", self.target, data, headers)
        answer = connection.getresponse()
        answer.read()
        if answer.will_close:
            connection.close()
        return Answer(answer.status, answer.reason, answer.getheader("retry-after"))

    def _failed(self, exc: Exception) -> Unsent:
        """The error to retry after, the connection closed (a half-done exchange leaves
        it unusable)."""
        self.connection.close()
        return Unsent(f"{type(exc).__name__}: {exc}")

    def close(self) -> None:
        self.connection.close()


class HttpxClient:
    """httpx for HTTPS and proxied endpoints: its proxies from the environment, its
    certificates (imported only when one is configured)."""

    def __init__(self, url: str, verify: ssl.SSLContext | bool, timeout_s: float) -> None:
        import httpx

        self.url = url
        self.client: httpx.Client = httpx.Client(verify=verify, timeout=timeout_s, trust_env=True)

    def post(self, data: bytes, headers: Mapping[str, str], timeout_s: float) -> Answer:
        """One POST; a connection error is tried again at once (a pooled connection the
        server had closed), as the SDK does."""
        import httpx

        try:
            try:
                answer = self._post(data, headers, timeout_s)
            except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError):
                answer = self._post(data, headers, timeout_s)
        except httpx.TransportError as exc:
            raise Unsent(f"{type(exc).__name__}: {exc}") from exc
        return Answer(answer.status_code, answer.reason_phrase, answer.headers.get("retry-after"))

    def _post(self, data: bytes, headers: Mapping[str, str], timeout_s: float) -> httpx.Response:
        answer = self.client.post(self.url, content=data, headers=headers, timeout=timeout_s)
        answer.read()
        return answer

    def close(self) -> None:
        self.client.close()


class OtlpHttp:
    """One endpoint's client: a kept-alive connection, the settings read once."""

    def __init__(self, env: Mapping[str, str], sleep: Callable[[float], None] = time.sleep):
        self.url = endpoint(env)
        self.compression = compression(env)
        self.timeout_s = timeout_s(env)
        self.headers = headers(env, self.compression)
        self._compress = _compressor(self.compression)
        self._sleep = sleep
        self.transport: Transport = (
            KeptConnection(self.url)
            if plain_http(self.url)
            else HttpxClient(self.url, tls(env), self.timeout_s)
        )

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
                timeout = max(deadline - time.monotonic(), 0.001)
                answer = self.transport.post(data, self.headers, timeout)
            except Unsent as exc:
                why = str(exc)
            else:
                if answer.status < 400:
                    return True
                why = f"HTTP {answer.status} {answer.reason}"
                if answer.status not in RETRYABLE:
                    break
                after = retry_after_s(answer.retry_after)
                backoff = backoff if after is None else after
            if attempt + 1 == MAX_ATTEMPTS or backoff > deadline - time.monotonic():
                break
            self._sleep(backoff)
        log.error("tracing: dropped %d spans: the OTLP endpoint answered %s", spans, why)
        return False

    def shutdown(self) -> None:
        self.transport.close()
