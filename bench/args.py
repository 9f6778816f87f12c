"""What every ``python -m bench.X`` command line shares: its parser, and the scale flags
(``--docs``, ``--slots``, ``--repeat``, ``--quick``) of the queue benchmarks."""

from __future__ import annotations

import argparse
from typing import Any


def bench_parser(module: str, doc: str | None) -> argparse.ArgumentParser:
    """The parser of ``python -m <module>``; ``--help`` shows the module's docstring as
    written."""
    return argparse.ArgumentParser(
        prog=f"python -m {module}",
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_scale_args(parser: argparse.ArgumentParser, *, docs: str, repeat: str, quick: str) -> None:
    """``--docs``, ``--repeat`` and ``--quick`` (helps as given) and ``--slots``."""
    parser.add_argument("--docs", type=int, help=docs)
    parser.add_argument("--slots", help="slots per stage, comma-separated (1,4,16)")
    parser.add_argument("--repeat", type=int, help=repeat)
    parser.add_argument("--quick", action="store_true", help=quick)


def scale_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The scale flags given on the command line, as Options fields."""
    out: dict[str, Any] = {}
    if args.docs is not None:
        out["docs"] = args.docs
    if args.repeat is not None:
        out["repeat"] = args.repeat
    if args.slots:
        out["slots"] = tuple(int(s) for s in args.slots.split(","))
    return out
