"""``ragline sync`` on a large folder: what a sync costs beyond the stages' own work.

``python -m bench.sync [--files 10000] [--change 0.01] [--repeat 3]`` creates a throwaway
database (``ragline_bench_<random>``) on ``DATABASE_URL`` (default: the local server) and a
folder of N small files (a ``%PDF-`` header and a distinct line each, in 100
subfolders), syncs it once (N new documents; no stage runs here), then prints:

1. **no change**: the whole command, ``python -m runtime sync FOLDER`` in a subprocess
   (interpreter start-up, imports, database check, listing N files with a stat each,
   comparing with N rows; nothing to hash, nothing to run) — floor ≤ 5 s; and the same
   plan+apply in this process, without the process start-up;
2. **1% change**: N/100 files rewritten with new bytes; the plan and its application in
   this process (listing, hashing the changed files, storing them, recording each new
   version and queueing its parse): everything sync does beyond the changed documents'
   own stage work, which is not run here — floor ≤ 2 s. The command then waits for those
   documents with ``ingest``'s watcher (a poll every 0.25 s).

Medians of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from bench.database import bench_database, connection, pool_of, server_dsn
from bench.report import heading, verdict
from stages.actions.sync import Plan, apply, plan
from stages.adapters.sources.folder import FolderScanner
from stages.db import sources
from stages.services import Services

NO_CHANGE_FLOOR_S = 5.0
CHANGE_FLOOR_S = 2.0


def content(i: int, version: int = 1) -> bytes:
    return f"%PDF-1.4\n% ragline bench file {i} version {version}\n%%EOF\n".encode()


def make_folder(root: Path, files: int) -> list[Path]:
    paths = []
    for i in range(files):
        path = root / f"d{i % 100:02}" / f"f{i:05}.pdf"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content(i))
        paths.append(path)
    return paths


async def sync_in_process(dsn: str, folder: Path, data_dir: Path) -> tuple[float, Plan]:
    services = Services({"RAGLINE_VISION": "none"}, data_dir)
    scanner = FolderScanner(folder)
    async with pool_of(dsn, 4) as pool, services.lifespan():
        started = time.perf_counter()
        source = await sources.ensure_source(pool, scanner.uri, "default")
        async with sources.source_lock(pool, source.id):
            todo = await plan(pool, scanner, source, source.collection)
            await apply(pool, services, scanner, source, todo)
        return time.perf_counter() - started, todo


async def stand_in_for_the_stages(dsn: str) -> None:
    """The documents as if their stages had run (this bench measures sync, not them):
    ready, no job queued, so ``sync`` has nothing of the source's to wait for."""
    async with connection(dsn) as conn:
        await conn.execute("UPDATE stage_jobs SET state = 'cancelled' WHERE state = 'queued'")
        await conn.execute("UPDATE documents SET status = 'ready', stage = NULL")


def sync_command(dsn: str, folder: Path, data_dir: Path) -> float:
    argv = [sys.executable, "-m", "runtime", "--database-url", dsn, "--data-dir", str(data_dir)]
    argv += ["--log-level", "warning", "sync", str(folder), "--json", "--no-progress"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGLINE_")}
    started = time.perf_counter()
    done = subprocess.run(argv, env={**env, "RAGLINE_VISION": "none"}, capture_output=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0 or b'"new": 0' not in done.stdout:
        raise SystemExit(f"sync failed: {done.returncode} {done.stdout!r} {done.stderr!r}")
    return elapsed


async def run(files: int, change: float, repeat: int) -> bool:
    async with bench_database(server_dsn()) as dsn:
        with tempfile.TemporaryDirectory(prefix="ragline-bench-sync-") as tmp:
            folder, data_dir = Path(tmp) / "src", Path(tmp) / "data"
            paths = make_folder(folder, files)
            first_s, first = await sync_in_process(dsn, folder, data_dir)
            await stand_in_for_the_stages(dsn)
            heading(f"sync of {files} files")
            print(f"first sync (store {len(first.new)} files, no stage run): {first_s:.2f} s")
            cmd = [await anyio.to_thread.run_sync(sync_command, dsn, folder, data_dir)]
            cmd += [sync_command(dsn, folder, data_dir) for _ in range(repeat - 1)]
            inner = [(await sync_in_process(dsn, folder, data_dir))[0] for _ in range(repeat)]
            no_change = statistics.median(cmd)
            print(
                f"no change, the command: median {no_change:.2f} s "
                f"({', '.join(f'{t:.2f}' for t in cmd)}); in process: median "
                f"{statistics.median(inner):.2f} s  floor <= {NO_CHANGE_FLOOR_S:.0f} s: "
                f"{verdict(no_change <= NO_CHANGE_FLOOR_S)}"
            )
            changed_s = []
            for version in range(2, repeat + 2):
                step = max(1, int(1 / change))
                for i in range(0, files, step):
                    paths[i].write_bytes(content(i, version))
                took, todo = await sync_in_process(dsn, folder, data_dir)
                assert len(todo.changed) == len(range(0, files, step)), todo.counts()
                changed_s.append(took)
            one_pct = statistics.median(changed_s)
            print(
                f"{change:.0%} changed ({len(range(0, files, max(1, int(1 / change))))} files), "
                f"plan + apply: median {one_pct:.2f} s "
                f"({', '.join(f'{t:.2f}' for t in changed_s)})  floor <= "
                f"{CHANGE_FLOOR_S:.0f} s: {verdict(one_pct <= CHANGE_FLOOR_S)}"
            )
            return no_change <= NO_CHANGE_FLOOR_S and one_pct <= CHANGE_FLOOR_S


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--change", type=float, default=0.01)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    anyio.run(run, args.files, args.change, args.repeat)


if __name__ == "__main__":
    main()
