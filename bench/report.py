"""How the benchmarks print: the first line (what a run ran on), section headings,
right-aligned rows, nearest-rank percentiles and the verdict against a floor."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence

from bench.database import connection


async def banner(server_dsn: str, title: str, *uses: str, after: str = "") -> None:
    """Print a benchmark's first line: what it runs on (PostgreSQL, Python, ``uses``,
    CPUs, then ``after``)."""
    async with connection(server_dsn) as conn:
        version = await conn.fetchval("SHOW server_version")
    parts = [f"PostgreSQL {version}", f"Python {sys.version.split()[0]}", *uses]
    parts += [f"{os.cpu_count()} CPUs"] + ([after] if after else [])
    print(f"{title}: {', '.join(parts)}")


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def verdict(ok: bool) -> str:
    return "ok" if ok else "BELOW FLOOR"


def heading(text: str) -> None:
    print(f"\n== {text} ==", flush=True)


def row(*cells: object, widths: Sequence[int]) -> None:
    print("  ".join(str(c).rjust(w) for c, w in zip(cells, widths, strict=True)), flush=True)
