"""The house rules, checked on the source tree: no import cycle between modules, every
import-linter contract able to fail, and the architecture map naming every module.

Rooms and doors are the import-linter contracts in ``pyproject.toml`` (``lint-imports``
runs in CI); function size is ruff's complexity limit (C90). A contract is trusted only
once it has been seen broken: :func:`test_every_contract_breaks_on_its_violation` plants
one deliberate violation per contract in a copy of the tree and runs ``lint-imports``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("runtime", "stages")
TREES = ("runtime", "stages", "schema", "bench", "tests")

#: Each contract's name (as pyproject.toml spells it) → a violation of it: the file to
#: write (or append to, with ``+``) in the copy, and the line.
VIOLATIONS = {
    "The engine never imports the pipeline or its libraries": (
        "runtime/_planted.py",
        "import stages.app",
    ),
    "schema is a leaf": ("schema/_planted.py", "import runtime.errors"),
    "The pipeline uses the engine only through runtime.api": (
        "stages/ports/_planted_engine.py",
        "import runtime.errors",
    ),
    "Benchmarks never import the tests (what both need lives in bench.harness)": (
        "bench/_planted.py",
        "import tests.conftest",
    ),
    "stages/ layers: each room imports only the rooms below it": (
        "stages/text/_planted.py",
        "import stages.settings",
    ),
    "The five stages never import each other": (
        "+stages/pipeline/parse.py",
        "import stages.pipeline.chunk",
    ),
    "Adapters of different ports are independent": (
        "+stages/adapters/assets/directory.py",
        "import stages.adapters.embedder.local",
    ),
    "Only the composition root builds adapters (tests and benchmarks may too)": (
        "stages/actions/_planted.py",
        "import stages.adapters.assets.directory",
    ),
    "Client libraries are imported only under adapters/ and parsing/": (
        "stages/db/_planted.py",
        "import minio",
    ),
    "Parse and submit load no service client library": (
        "+stages/actions/submit.py",
        "import qdrant_client",
    ),
}


def _cycle(graph: grimp.ImportGraph) -> list[str] | None:
    """One import cycle between modules, if there is any (iterative DFS, three colours)."""
    state: dict[str, int] = {}
    for root in sorted(graph.modules):
        if state.get(root):
            continue
        stack = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        path = [root]
        state[root] = 1
        while stack:
            module, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                path.pop()
                state[module] = 2
            elif state.get(child) == 1:
                return [*path[path.index(child) :], child]
            elif not state.get(child):
                state[child] = 1
                path.append(child)
                stack.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
    return None


def test_no_import_cycle() -> None:
    graph = grimp.build_graph(*PACKAGES, "schema")
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def _contract_names() -> list[str]:
    text = (ROOT / "pyproject.toml").read_text()
    return re.findall(r'^name = "(.+)"$', text.split("[tool.importlinter]", 1)[1], re.M)


def test_every_contract_has_a_planted_violation() -> None:
    assert sorted(_contract_names()) == sorted(VIOLATIONS)


def _copy_tree(to: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "cache", "static", "data", "*.sql")
    for tree in TREES:
        shutil.copytree(ROOT / tree, to / tree, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", to / "pyproject.toml")


def _plant(to: Path) -> None:
    for where, line in VIOLATIONS.values():
        path = to / where.lstrip("+")
        before = path.read_text() if where.startswith("+") else ""
        path.write_text(f"{before}\n{line}  # planted by tests/unit/test_house.py\n")


def _verdicts(output: str) -> dict[str, str]:
    found = re.findall(r"^(.+) (KEPT|BROKEN)(?: \(\d+ ignored imports?\))?$", output, re.M)
    return {name: verdict for name, verdict in found}


def _lint_imports(cwd: Path) -> str:
    command = [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"]
    done = subprocess.run(command, cwd=cwd, env={"PYTHONPATH": str(cwd)}, capture_output=True)
    return done.stdout.decode()


def test_every_contract_breaks_on_its_violation(tmp_path: Path) -> None:
    """Each contract keeps on the real tree and breaks on its planted violation."""
    _copy_tree(tmp_path)
    kept = _verdicts(_lint_imports(tmp_path))
    assert kept == dict.fromkeys(VIOLATIONS, "KEPT")
    _plant(tmp_path)
    broken = _verdicts(_lint_imports(tmp_path))
    assert broken == dict.fromkeys(VIOLATIONS, "BROKEN")


def _module_paths() -> list[str]:
    """Every module, by path; a package by its folder (``stages/pipeline/``)."""
    found = []
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            rel = path.relative_to(ROOT)
            found.append(f"{rel.parent}/" if path.name == "__init__.py" else str(rel))
    return sorted(found)


def test_the_architecture_map_names_every_module() -> None:
    """docs/architecture.md's map is the tree: each module and package appears there by
    its path, so a module added without a place on the map fails here."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    missing = [p for p in _module_paths() if f"`{p}`" not in text]
    assert not missing, "missing from docs/architecture.md's map: " + ", ".join(missing)
