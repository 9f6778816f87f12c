"""The house rules that keep rooms small and doors narrow, checked on the source tree.

Each file in ``runtime/`` and ``stages/`` holds one role: at most 400 lines, no class over
200, and no import cycle between modules (docs/architecture.md has the map).
"""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("runtime", "stages")
MAX_MODULE_LINES = 400
MAX_CLASS_LINES = 200


def _modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_module_holds_one_role(path: Path) -> None:
    text = path.read_text()
    lines = text.count("\n")
    assert lines <= MAX_MODULE_LINES, f"{path.relative_to(ROOT)}: {lines} lines"
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef):
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            assert size <= MAX_CLASS_LINES, f"{path.name}: class {node.name} is {size} lines"


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
