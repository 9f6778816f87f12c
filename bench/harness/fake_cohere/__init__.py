"""A local Cohere-compatible HTTP server for tests, benchmarks and chaos runs.

Real HTTP on 127.0.0.1 in a background thread, speaking just enough of Cohere's v2 API
for the ``cohere`` SDK to parse its answers:

- ``POST /v2/embed``: deterministic unit vectors derived from a hash of (model, text), so
  the same text always maps to the same vector (see :func:`fake_vector`).
- ``POST /v2/chat``: describes the image it was sent ("image of N bytes (image/png)").
- ``GET /_stats``: the counters as JSON; ``POST /_faults`` appends scripted faults (a JSON
  list of :class:`Fault` objects); ``POST /_reset`` clears counters and faults;
  ``POST /_outage`` with ``{"status": 503}`` answers every call with that status until
  ``{"status": null}`` ends the outage (:meth:`FakeCohere.outage` in-process).

Gateways that differ from Cohere: ``float_only`` answers only ``float`` embeddings,
whatever was asked; ``reject_base64`` answers 400 to a request for ``base64``.

Faults are injected per test: a script consumed in order (:class:`Fault`) and/or random
ones drawn from a seeded generator (:class:`FaultRates`). A server-side rate limit can
answer 429 like the real API. In tests::

    with FakeCohere(dims=64, faults=[Fault(status=500)]) as server:
        client = cohere.AsyncClientV2(api_key="test", base_url=server.base_url)

Standalone, for chaos runs with several worker processes::

    python -m bench.harness.fake_cohere --port 0 --error-rate 0.2 --rate-429 0.1
"""

from bench.harness.fake_cohere.models import Fault, FaultRates, Stats, fake_vector
from bench.harness.fake_cohere.process import FakeCohereProcess
from bench.harness.fake_cohere.server import FakeCohere

__all__ = ["FakeCohere", "FakeCohereProcess", "Fault", "FaultRates", "Stats", "fake_vector"]
