"""CPython settings of a worker process, applied once its pipeline is built."""

from __future__ import annotations

import gc
import sys

#: How long a thread holding the GIL runs before one that waits for it gets a turn
#: (CPython's default: 5 ms).
WORKER_SWITCH_INTERVAL_S = 0.001


def tune_worker_interpreter() -> None:
    """:func:`freeze_startup_objects`, and shorter GIL turns.

    A worker's event loop (claims, settlements, heartbeats) shares the GIL with the
    threads that parse and chunk. Each time the loop wakes (a reply from PostgreSQL) it
    waited up to a whole turn for the GIL, so a job's many round trips queued behind
    parsing: on bench.ingest's corpus the index jobs of the process holding the shard
    fell 1-11 s behind, and ran in a burst after the last document was embedded (1.4 s
    of the run with one core idle). With 1 ms turns that tail was 0.3 s, and the span
    per CPU second of the workers 2% lower over three alternating pairs.
    """
    freeze_startup_objects()
    sys.setswitchinterval(WORKER_SWITCH_INTERVAL_S)


def freeze_startup_objects() -> int:
    """Move every object alive now (modules, classes, the built pipeline) out of the
    garbage collector's reach; returns how many it now skips.

    A worker's full collections otherwise walk the whole start-up heap (numpy, PyMuPDF,
    qdrant-edge, asyncpg and ragline's own modules) again and again, though none of it is
    ever garbage: on bench.ingest's corpus the collector took 1.2 s of two workers' 46 s
    of CPU, full collections about 50 ms each (1.0 s with the heap frozen).
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
