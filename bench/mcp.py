"""What the MCP server adds to a search: the same query as ``tools/call search`` over stdio
(``ragline mcp``), over streamable HTTP (``serve``'s ``/mcp``) and as ``GET /v1/search``.

``python -m bench.mcp [--calls N]`` submits the four samples through the stdio server on
a throwaway database (``DATABASE_URL``, default the local server), runs a worker until
idle, then times N calls of each door after 5 warm-up calls (median and p90 of the round
trip, client side, one call at a time).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from bench.harness.cli import Cli, cli_env
from bench.harness.db import throwaway_database
from bench.harness.serve import running_server

REPO = Path(__file__).resolve().parents[1]
SAMPLES = ("sourdough.pdf", "lighthouses.pdf", "rust-borrow-checker.pdf", "tides.md")
QUERY = "why the sea rises twice a day"
WARM_UP = 5


async def timed(call: Callable[[], Awaitable[Any]], calls: int) -> str:
    for _ in range(WARM_UP):
        await call()
    took = []
    for _ in range(calls):
        started = time.perf_counter()
        await call()
        took.append((time.perf_counter() - started) * 1000)
    p90 = sorted(took)[int(calls * 0.9) - 1]
    return f"median {statistics.median(took):.1f} ms, p90 {p90:.1f} ms"


async def by_stdio(cli: Cli, calls: int) -> str:
    [exe, *argv] = cli.argv("mcp")
    params = StdioServerParameters(command=exe, args=argv, env=cli_env(), cwd=str(REPO))
    with (cli.logs / "mcp.err").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            for name in SAMPLES:
                await client.call_tool("submit", {"path": str(REPO / "samples" / name)})
            done = await anyio.to_thread.run_sync(lambda: cli.run("--exit-when-idle"))
            assert done.code == 0, done
            ask = {"query": QUERY, "k": 5}
            return await timed(lambda: client.call_tool("search", ask), calls)


async def by_http(url: str, calls: int) -> tuple[str, str]:
    async with (
        httpx2.AsyncClient() as http,
        Client(streamable_http_client(url + "/mcp", http_client=http)) as client,
    ):
        ask = {"query": QUERY, "k": 5}
        mcp = await timed(lambda: client.call_tool("search", ask), calls)
    async with httpx.AsyncClient(base_url=url) as plain:
        params: dict[str, str | int] = {"q": QUERY, "k": 5}
        api = await timed(lambda: plain.get("/v1/search", params=params), calls)
    return mcp, api


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mcp", description=__doc__)
    parser.add_argument("--calls", type=int, default=50, help="timed calls per door (50)")
    args = parser.parse_args()
    server_dsn = os.environ.get("DATABASE_URL", "postgresql://root@127.0.0.1:5432/postgres")
    with (
        tempfile.TemporaryDirectory(prefix="ragline-bench-mcp-") as raw,
        throwaway_database(server_dsn, "ragline_mcp") as dsn,
    ):
        cli = Cli(dsn, Path(raw) / "data", Path(raw) / "logs")
        stdio = anyio.run(by_stdio, cli, args.calls)
        with running_server(cli) as server:
            mcp, api = anyio.run(by_http, server.url, args.calls)
    print(f"search, {args.calls} calls each, one at a time (round trip, client side):")
    print(f"  MCP stdio  tools/call search  {stdio}")
    print(f"  MCP HTTP   tools/call search  {mcp}")
    print(f"  HTTP API   GET /v1/search     {api}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
