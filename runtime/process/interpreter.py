"""CPython settings of a worker process, applied once its pipeline is built."""

from __future__ import annotations

import gc

#: Allocations (less deallocations) between young-generation collections; CPython's 700.
YOUNG_THRESHOLD = 10_000


def tune_worker_interpreter() -> None:
    """:func:`freeze_startup_objects`, then young collections every
    :data:`YOUNG_THRESHOLD` allocations instead of 700.

    A worker allocates in bursts (a document's rows, chunks and points at a time) that
    mostly die by reference count; at 700 the collector ran ~850 times a run in each of
    bench.ingest's two workers, walking what was alive at each (0.16 s per worker,
    ``gc.callbacks``); at 10,000 once start-up is done, ~220 times, 200 of them during
    start-up (0.08-0.10 s). The older generations keep CPython's thresholds.

    The GIL's turns stay CPython's (5 ms). Workers took 1 ms turns while PyMuPDF parsed
    in their interpreter, so the event loop did not queue behind it; with parsing in a
    parser process (``stages/parsing/process.py``) the shorter turns only cost switches:
    bench.ingest's span 2.7% longer and its CPU 3% higher than with the default (medians
    of seven alternating pairs).
    """
    freeze_startup_objects()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)


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
