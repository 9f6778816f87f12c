"""Method parity between a port (a ``Protocol``) and the classes that implement it.

Every member the port declares must exist on each implementation class in the same form:
a method with the same parameters (names and kinds, in order), ``async`` exactly where
the port's is; an attribute or property where the port declares one (a class attribute,
a property, or an attribute the class sets on ``self``). Checked on the classes, not on
instances, so an adapter no test builds is held to its port all the same (PgQueuer's
port-conformance test; ``tests/conformance/test_jobstore.py`` does the same for the
JobStore).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["parity_problems", "port_members"]


class _Attribute:
    """An attribute the port declares by annotation only (``uri: str``)."""


ATTRIBUTE = _Attribute()
_MISSING = object()


def port_members(port: type) -> dict[str, object]:
    """What ``port`` declares, by name (private names aside): its methods, properties and
    annotated attributes, with those of the protocols it extends."""
    if not getattr(port, "_is_protocol", False):
        raise TypeError(f"{port.__name__} is not a Protocol")
    members: dict[str, object] = {}
    for klass in reversed(port.__mro__):
        if klass is Protocol or not vars(klass).get("_is_protocol", False):
            continue
        for name in vars(klass).get("__annotations__", {}):
            members[name] = ATTRIBUTE
        for name, value in vars(klass).items():
            if not name.startswith("_"):
                members[name] = value
    return members


def parity_problems(port: type, implementation: type) -> list[str]:
    """One line per member of ``port`` that ``implementation`` lacks or has in another
    form; empty when the class implements every member."""
    problems: list[str] = []
    on_self = _set_on_self(implementation)
    for name, declared in sorted(port_members(port).items()):
        where = f"{implementation.__name__}.{name}"
        found = inspect.getattr_static(implementation, name, _MISSING)
        if inspect.isfunction(declared):
            method = getattr(implementation, name, None)
            problems += _method_problems(where, declared, found, method)
        elif found is _MISSING and name not in on_self:
            problems.append(f"{where}: missing ({port.__name__} declares it)")
        elif inspect.isfunction(found):
            problems.append(f"{where}: a method where {port.__name__} declares an attribute")
    return problems


def _method_problems(
    where: str, declared: Callable[..., Any], found: object, method: object
) -> list[str]:
    if found is _MISSING:
        return [f"{where}: missing (the port declares a method)"]
    if isinstance(found, property) or not callable(method):
        return [f"{where}: not a method (the port declares one)"]
    want, got = _parameters(declared), _parameters(method)
    if got != want:
        return [f"{where}: parameters {got}, the port's are {want}"]
    if _is_async(declared) != _is_async(method):
        return [f"{where}: async must match the port (the port's is async: {_is_async(declared)})"]
    return []


def _parameters(function: Callable[..., Any]) -> list[tuple[str, str]]:
    return [(p.name, p.kind.name) for p in inspect.signature(function).parameters.values()]


def _is_async(function: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(inspect.unwrap(function))


def _set_on_self(implementation: type) -> set[str]:
    """Names the class (or a base) declares as fields or assigns to ``self.<name>``."""
    names: set[str] = set()
    for klass in implementation.__mro__[:-1]:
        names.update(vars(klass).get("__annotations__", {}))
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AnnAssign | ast.AugAssign):
                targets = [node.target]
            else:
                continue
            names.update(
                t.attr
                for t in targets
                if isinstance(t, ast.Attribute)
                and isinstance(t.value, ast.Name)
                and t.value.id == "self"
            )
    return names
