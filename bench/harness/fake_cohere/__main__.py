"""``python -m bench.harness.fake_cohere``: the server in its own process; prints its URL
first, its counters as JSON on stderr when stopped (SIGINT or SIGTERM)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

import msgspec

from bench.harness.fake_cohere import __doc__ as DOC
from bench.harness.fake_cohere.models import FaultRates
from bench.harness.fake_cohere.server import FakeCohere


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.harness.fake_cohere", description=DOC)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port")
    p.add_argument("--dims", type=int, default=1024)
    p.add_argument("--error-rate", type=float, default=0.0, help="probability of a 500")
    p.add_argument("--rate-429", type=float, default=0.0, help="probability of a 429")
    p.add_argument("--reset-rate", type=float, default=0.0, help="probability of a reset")
    p.add_argument("--slow-rate", type=float, default=0.0, help="probability of a slow answer")
    p.add_argument("--slow-s", type=float, default=5.0)
    p.add_argument("--retry-after-s", type=float, default=1.0)
    p.add_argument("--rate-limit-per-s", type=float, default=None)
    p.add_argument("--api-key", default=None, help="require this bearer token")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--float-only", action="store_true", help="answer only float embeddings")
    p.add_argument("--reject-base64", action="store_true", help="400 to base64 requests")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = _parse_args(argv)
    rates = FaultRates(
        error_500=args.error_rate,
        rate_429=args.rate_429,
        reset=args.reset_rate,
        slow=args.slow_rate,
        slow_s=args.slow_s,
        retry_after_s=args.retry_after_s,
        seed=args.seed,
    )
    server = FakeCohere(
        dims=args.dims,
        rates=rates,
        rate_limit_per_s=args.rate_limit_per_s,
        api_key=args.api_key,
        host=args.host,
        port=args.port,
        float_only=args.float_only,
        reject_base64=args.reject_base64,
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with server:
        print(server.base_url, flush=True)  # the first line is the URL, for scripts to read
        stop.wait()
    print(json.dumps(msgspec.to_builtins(server.snapshot())), file=sys.stderr)


if __name__ == "__main__":
    main()
