"""Method parity for the ports without a behaviour suite here: every member that the
embedder, vision and source-scanner ports declare exists on each of their adapters with
the port's parameters (tests/support/parity.py). The asset store's and the vector
index's parity tests sit in their own suites; and the check itself is seen failing on
each kind of drift, so none of these can pass vacuously."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Protocol

import pytest

from stages.adapters.embedder.cohere import CohereEmbedder
from stages.adapters.embedder.local import LocalEmbedder
from stages.adapters.sources.bucket import BucketScanner
from stages.adapters.sources.folder import FolderScanner
from stages.adapters.vision.cohere import CohereVision
from stages.adapters.vision.none import NoVision
from stages.adapters.vision.ocr import LocalOCR
from stages.ports.embedder import Embedder
from stages.ports.sources import Scanner
from stages.ports.vision import VisionModel
from tests.support.parity import parity_problems, port_members

#: Each port, a few members it must declare (so the check cannot run on nothing), and
#: every adapter of it.
PORTS: list[tuple[type, set[str], tuple[type, ...]]] = [
    (Embedder, {"embed", "dimensions", "metered"}, (CohereEmbedder, LocalEmbedder)),
    (
        VisionModel,
        {"describe", "metered", "describes", "parallel"},
        (CohereVision, LocalOCR, NoVision),
    ),
    (Scanner, {"uri", "list", "chunks", "path_of"}, (FolderScanner, BucketScanner)),
]
CASES = [
    pytest.param(port, declared, impl, id=f"{port.__name__}-{impl.__name__}")
    for port, declared, impls in PORTS
    for impl in impls
]


@pytest.mark.parametrize(("port", "declared", "implementation"), CASES)
def test_every_adapter_has_every_member_of_its_port(
    port: type, declared: set[str], implementation: type
) -> None:
    assert declared <= set(port_members(port))
    assert parity_problems(port, implementation) == []


# -- the check itself ----------------------------------------------------------------------


class _Port(Protocol):
    name: str

    @property
    def size(self) -> int: ...

    async def fetch(self, key: str, *, limit: int = 1) -> bytes: ...

    def stream(self, key: str) -> AsyncGenerator[bytes, None]: ...


class _Base:
    def __init__(self) -> None:
        self.name = "base"


class _Conforming(_Base):
    size = 3

    async def fetch(self, key: str, *, limit: int = 1) -> bytes:
        return b""

    async def stream(self, key: str) -> AsyncGenerator[bytes, None]:
        yield b""


class _Missing:
    name = "m"

    async def fetch(self, key: str, *, limit: int = 1) -> bytes:
        return b""


class _Drifted:
    def name(self) -> str:
        return "d"

    @property
    def size(self) -> int:
        return 1

    def fetch(self, key: str, *, limit: int = 1) -> bytes:
        return b""

    async def stream(self, path: Path) -> AsyncGenerator[bytes, None]:
        yield b""


class _Positional(_Conforming):
    async def fetch(self, key: str, limit: int = 1) -> bytes:
        return b""


def test_the_parity_check_sees_each_kind_of_drift() -> None:
    assert set(port_members(_Port)) == {"name", "size", "fetch", "stream"}
    assert parity_problems(_Port, _Conforming) == []
    assert parity_problems(_Port, _Missing) == [
        "_Missing.size: missing (_Port declares it)",
        "_Missing.stream: missing (the port declares a method)",
    ]
    assert parity_problems(_Port, _Drifted) == [
        "_Drifted.fetch: async must match the port (the port's is async: True)",
        "_Drifted.name: a method where _Port declares an attribute",
        "_Drifted.stream: parameters [('self', 'POSITIONAL_OR_KEYWORD'), ('path', "
        "'POSITIONAL_OR_KEYWORD')], the port's are [('self', 'POSITIONAL_OR_KEYWORD'), "
        "('key', 'POSITIONAL_OR_KEYWORD')]",
    ]
    [positional] = parity_problems(_Port, _Positional)
    assert positional.startswith("_Positional.fetch: parameters")
    with pytest.raises(TypeError, match="not a Protocol"):
        port_members(_Conforming)
