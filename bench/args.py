"""What every ``python -m bench.X`` command line shares: its parser, and the scale flags
(``--docs``, ``--slots``, ``--repeat``, ``--quick``) of the queue benchmarks."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, TypeVar

import msgspec


class Scale(msgspec.Struct, frozen=True, kw_only=True):
    """The sizes the scale flags set; a queue benchmark's Options extend it."""

    #: Documents per throughput run.
    docs: int = 5000
    #: The slot counts per stage to measure at.
    slots: tuple[int, ...] = (1, 4, 16)
    #: Alternating runs per pair (the median is reported).
    repeat: int = 2


ScaleT = TypeVar("ScaleT", bound=Scale)


def bench_parser(module: str, doc: str | None) -> argparse.ArgumentParser:
    """The parser of ``python -m <module>``; ``--help`` shows the module's docstring as
    written."""
    return argparse.ArgumentParser(
        prog=f"python -m {module}",
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def parse_scaled(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None, full: ScaleT, quick: ScaleT
) -> tuple[ScaleT, argparse.Namespace]:
    """Add the scale flags to ``parser`` and parse ``argv``: ``full`` (or ``quick`` under
    ``--quick``) with the sizes given on the command line, and the parsed arguments. The
    helps show the defaults of ``full`` and ``quick``, so they live in one place."""
    parser.add_argument("--docs", type=int, help=f"documents per throughput run ({full.docs})")
    parser.add_argument("--slots", help=f"slots per stage, comma-separated ({_csv(full.slots)})")
    parser.add_argument("--repeat", type=int, help=f"alternating runs per pair ({full.repeat})")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a smoke run: {quick.docs} documents, slots {_csv(quick.slots)}, "
        f"repeat {quick.repeat}",
    )
    args = parser.parse_args(argv)
    base = quick if args.quick else full
    return msgspec.structs.replace(base, **_overrides(args)), args


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The scale flags given on the command line, as Options fields."""
    out: dict[str, Any] = {}
    if args.docs is not None:
        out["docs"] = args.docs
    if args.repeat is not None:
        out["repeat"] = args.repeat
    if args.slots:
        out["slots"] = tuple(int(s) for s in args.slots.split(","))
    return out


def _csv(numbers: Sequence[int]) -> str:
    return ",".join(str(n) for n in numbers)
