"""What importing a stage, the server or one service loads: no client library it does not
use (the import-linter contract sees imports; this sees ``sys.modules`` at run time)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.harness.procs import REPO

CLIENT_LIBRARIES = ("minio", "qdrant_client", "qdrant_edge", "cohere")


_PROBE = (
    "import sys, {imports}; "
    # Entries set to None are blocked imports (a library's own opt-out), not loaded ones.
    "print(' '.join(sorted({{n.split('.')[0] for n, m in sys.modules.items() if m}})))"
)


def loaded_after(imports: str) -> set[str]:
    """Top-level packages in sys.modules after ``import <imports>`` in a fresh interpreter."""
    code = _PROBE.format(imports=imports)
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    return set(out.stdout.split())


def test_parse_and_submit_load_no_client_library() -> None:
    loaded = loaded_after("stages.pipeline.parse, stages.actions.submit")
    assert "stages" in loaded  # the probe sees what it imported
    assert loaded.isdisjoint(CLIENT_LIBRARIES), sorted(loaded & set(CLIENT_LIBRARIES))


def test_the_server_loads_neither_pymupdf_nor_a_client_library() -> None:
    # Why the server once had its own ServeServices: Services pulled in PyMuPDF.
    loaded = loaded_after("stages.services, stages.serve.asgi")
    assert "litestar" in loaded
    assert loaded.isdisjoint({"pymupdf", "fitz", *CLIENT_LIBRARIES})


def test_the_parser_process_loads_no_numpy() -> None:
    # ~10 MB of the parser process's resident size (stages.parsing.formats.png).
    assert "numpy" not in loaded_after("stages.parsing.child")


def test_building_a_service_loads_only_its_adapter(tmp_path: Path) -> None:
    code = (
        "import sys, pathlib; from stages.services import Services; "
        f"Services({{}}, pathlib.Path({str(tmp_path)!r})).assets; "
        "print('minio' in sys.modules, 'stages.adapters.assets.directory' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["False", "True"]
