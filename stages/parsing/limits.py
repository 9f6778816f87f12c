"""The parser process's limits on each document: memory (its address space, ``RLIMIT_AS``),
CPU time (``RLIMIT_CPU``) and the characters of text it may yield, and what exceeding
each reads as.

The parser sets the first two before each document (:func:`apply`): the address space is capped
at ``memory_mb`` for the whole process (start-up included, ~260 MB with every reader
loaded), the CPU time at what it has used so far plus ``cpu_s``, so each document gets
the same budget although one parser reads many. An allocation over the cap fails: Python
raises MemoryError, MuPDF and libxml2 report it as an error of their own
(:func:`out_of_memory` recognises both), and the document fails with
:func:`memory_exceeded`; the parser then retires, so the next document gets a fresh one.
Over the CPU budget the kernel sends SIGXCPU, whose default action ends the parser
wherever it is (in MuPDF's C code too, where no Python handler would run); the worker
reads that death as :func:`cpu_exceeded` and starts a new parser for the next document.
The text limit (:func:`text_exceeded`) is counted by the parser as it reads: every stage
after parse holds a document's text (the worker's parse stage its pages, the chunk stage
its pages and chunks), so its size bounds theirs. Neither the memory nor the CPU limit
scales with pages: the readers stream a page (or section) at a time (HTML and Markdown
but for their parsers' trees), so memory does not grow with the page count, and 120 s
of CPU is tens of thousands of PDF pages (a 2,000-page PDF parses in well under 20 s on
the development machine). Why, and the figures: docs/formats.md, "The parser's limits".
"""

from __future__ import annotations

import re
import resource
from pathlib import Path

from runtime.api import InvalidDocument, RaglineError, one_line

__all__ = [
    "CPU_SETTING",
    "DEFAULT_PARSE_CPU_S",
    "DEFAULT_PARSE_MAX_CHARS",
    "DEFAULT_PARSE_MEMORY_MB",
    "MEMORY_SETTING",
    "TEXT_SETTING",
    "ParseLimitExceeded",
    "address_space_mb",
    "apply",
    "cpu_exceeded",
    "memory_exceeded",
    "near",
    "no_core_dumps",
    "out_of_memory",
    "text_exceeded",
]

MEMORY_SETTING = "RAGLINE_PARSE_MEMORY_MB"
CPU_SETTING = "RAGLINE_PARSE_CPU_S"
TEXT_SETTING = "RAGLINE_PARSE_MAX_CHARS"
#: The parser's address space while it reads a document, in MB.
DEFAULT_PARSE_MEMORY_MB = 1024
#: CPU seconds a document may take in the parser.
DEFAULT_PARSE_CPU_S = 120
#: Characters of text a document may have (about 15,000 pages of dense text).
DEFAULT_PARSE_MAX_CHARS = 50_000_000

_MB = 1 << 20
#: How MuPDF, libxml2 and Lexbor word a failed allocation.
_NO_MEMORY = re.compile(
    r"malloc|out of memory|cannot allocate|memory allocation|not enough memory", re.IGNORECASE
)


class ParseLimitExceeded(InvalidDocument):
    """The document needs more memory or CPU time than the parser may use on one."""

    kind = "parse_limit"


def memory_exceeded(name: str, memory_mb: int) -> ParseLimitExceeded:
    return ParseLimitExceeded(
        one_line(f"{name}: exceeded the {memory_mb} MB memory limit ({MEMORY_SETTING})")
    )


def cpu_exceeded(name: str, cpu_s: int) -> ParseLimitExceeded:
    return ParseLimitExceeded(one_line(f"{name}: exceeded the {cpu_s} s CPU limit ({CPU_SETTING})"))


def text_exceeded(name: str, max_chars: int) -> ParseLimitExceeded:
    return ParseLimitExceeded(
        one_line(f"{name}: exceeded the {max_chars:,} character text limit ({TEXT_SETTING})")
    )


def apply(memory_mb: int, cpu_s: int) -> None:
    """Limit this process for the next document (0: no limit). The hard limits are left
    as they are (a lowered hard limit could not be raised for the next document); a
    lower hard limit set from outside wins."""
    memory = memory_mb * _MB if memory_mb else resource.RLIM_INFINITY
    _set_soft(resource.RLIMIT_AS, memory)
    if cpu_s:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        used = usage.ru_utime + usage.ru_stime
        # Whole seconds of the process's CPU: the document gets at most cpu_s of its own.
        _set_soft(resource.RLIMIT_CPU, max(int(used + cpu_s), int(used) + 1))
    else:
        _set_soft(resource.RLIMIT_CPU, resource.RLIM_INFINITY)


def _set_soft(which: int, soft: int) -> None:
    _, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY and (soft == resource.RLIM_INFINITY or soft > hard):
        soft = hard
    resource.setrlimit(which, (soft, hard))


def no_core_dumps() -> None:
    """A parser ended by SIGXCPU leaves no core file (the signal's default action dumps
    one where the limit allows)."""
    _, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, hard))


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is a failed allocation."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, MemoryError):
            return True
        # Not ragline's own messages: they name the file, and a file may be called anything.
        if not isinstance(current, RaglineError) and _NO_MEMORY.search(str(current)):
            return True
        current = current.__cause__ or current.__context__
    return False


def address_space_mb(field: str = "VmSize") -> float:
    """This process's address space now (``VmPeak``: its largest yet), in MB; 0 where
    /proc is not there."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return 0.0
    for line in status.splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def near(memory_mb: int, start_mb: float, share: float) -> bool:
    """Whether this process's address space has peaked past ``share`` of the way from
    ``start_mb`` (its size when it started) to the limit.

    A failed allocation is not always worded as one (libxml2 may say "unknown error"),
    but a document that failed after taking the parser three quarters of the way to its
    limit failed for memory; a parser that went half way is retired after its document,
    so every document starts with its peak below that."""
    return address_space_mb("VmPeak") >= start_mb + share * (memory_mb - start_mb)
