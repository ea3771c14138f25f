"""The import rules of DESIGN §9 and §11 "One core", checked on the source.

Every module of src/bankrail is parsed with `ast`; every import counts, those under
`TYPE_CHECKING` and those inside a function included. Three rules:

- no import runs from a lower layer of §9 to a higher one;
- no two packages import each other (nor round a longer cycle);
- a `_module` is imported only from inside its own package.

A violation that could not be removed yet is listed in `KNOWN` with its reason, so that the test
passes today and fails on any new one. Remove an entry when its import goes: a stale entry fails.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = "bankrail"

# DESIGN §9, top to bottom. A unit is a top-level package or module of bankrail; a unit may
# import units of its own layer or of a lower one, never of a higher one. `bankrail` itself
# (`__init__.py`, which only names the version) and `testing` (the merchant developer's kit,
# which imports nothing else of bankrail) sit at the bottom: anything may use them.
LAYERS: list[tuple[str, frozenset[str]]] = [
    (
        "assembly",
        frozenset(
            {
                "__main__",
                "cli",
                "_serve",
                "_demo",
                "_shell",
                "_listen",
                "app",
                "worker",
                "config",
                "context",
                "process",
            }
        ),
    ),
    ("pages", frozenset({"pages"})),
    (
        "areas",
        frozenset(
            {
                "payments",
                "payouts",
                "refunds",
                "mandates",
                "merchants",
                "events",
                "rails",
                "sandbox",
            }
        ),
    ),
    ("http", frozenset({"http"})),
    ("ledger", frozenset({"ledger"})),
    ("security", frozenset({"security"})),
    ("jobs", frozenset({"jobs"})),
    ("db", frozenset({"db"})),
    ("core", frozenset({"core", "testing", ""})),
]

# The rails own the lifecycle that payouts and refunds follow (§11 "One core"): neither the
# rails nor refunds lean on payouts, even one way.
NOT_BETWEEN: frozenset[tuple[str, str]] = frozenset({("rails", "payouts"), ("refunds", "payouts")})

# Known violations: (importing module, imported module) -> why it is still here. None is left.
KNOWN: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Import:
    importer: str  # dotted module name, e.g. bankrail.payouts.models
    target: str  # dotted module name imported (a module, not a name inside one)
    line: int

    def __str__(self) -> str:
        return f"{self.importer}:{self.line} -> {self.target}"


def _module_name(path: Path) -> tuple[str, list[str]]:
    """The dotted name of the module at path, and the parts of the package it lives in."""
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
        return ".".join(parts), parts
    return ".".join(parts), parts[:-1]


def _is_module(dotted: str) -> bool:
    base = SRC.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _imports() -> list[Import]:
    found: list[Import] = []
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        module, package = _module_name(path)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found += [Import(module, a.name, node.lineno) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[: len(package) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                for alias in node.names:
                    submodule = f"{source}.{alias.name}"
                    target = submodule if _is_module(submodule) else source
                    found.append(Import(module, target, node.lineno))
    return [i for i in found if i.target == PACKAGE or i.target.startswith(PACKAGE + ".")]


IMPORTS = _imports()


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _layer(unit: str) -> int:
    for index, (_, units) in enumerate(LAYERS):
        if unit in units:
            return index
    raise AssertionError(f"bankrail.{unit} is in no layer of DESIGN §9: add it to LAYERS")


def _upward() -> list[Import]:
    return [i for i in IMPORTS if _layer(_unit(i.target)) < _layer(_unit(i.importer))]


def _private() -> list[Import]:
    wrong = []
    for i in IMPORTS:
        parts = i.target.split(".")
        for index, part in enumerate(parts):
            if part.startswith("_") and not part.startswith("__"):
                owner = ".".join(parts[:index])
                if not (i.importer + ".").startswith(owner + "."):
                    wrong.append(i)
                break
    return wrong


def _unit_graph() -> dict[str, list[Import]]:
    """Imports between two units of one layer (an upward one is reported as such)."""
    graph: dict[str, list[Import]] = defaultdict(list)
    for i in IMPORTS:
        a, b = _unit(i.importer), _unit(i.target)
        if a != b and _layer(a) == _layer(b):
            graph[f"{_unit(i.importer)} {_unit(i.target)}"].append(i)
    return graph


def _cycles() -> list[Import]:
    """Imports between units of a layer that reach each other, directly or round a cycle."""
    graph = _unit_graph()
    succ: dict[str, set[str]] = defaultdict(set)
    for pair in graph:
        a, b = pair.split(" ")
        succ[a].add(b)

    def reaches(start: str, goal: str) -> bool:
        seen, todo = {start}, [start]
        while todo:
            for nxt in succ[todo.pop()]:
                if nxt == goal:
                    return True
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return False

    return [
        i
        for pair, found in graph.items()
        for i in found
        if reaches(pair.split(" ")[1], pair.split(" ")[0])
    ]


def _not_between() -> list[Import]:
    return [i for i in IMPORTS if (_unit(i.importer), _unit(i.target)) in NOT_BETWEEN]


def _report(violations: list[Import]) -> list[str]:
    return [str(i) for i in violations if (i.importer, i.target) not in KNOWN]


def test_the_checker_sees_the_imports() -> None:
    # Type-checking and function-local imports are seen too (context.py, mandates/service.py).
    assert len(IMPORTS) > 500
    units = {_unit(i.importer) for i in IMPORTS}
    assert {"app", "payouts", "rails", "http", "core"} <= units
    for unit in units | {_unit(i.target) for i in IMPORTS}:
        _layer(unit)


def test_no_import_runs_upward() -> None:
    assert _report(_upward()) == []


def test_no_two_packages_import_each_other() -> None:
    assert _report(_cycles()) == []


def test_a_private_module_is_imported_only_inside_its_package() -> None:
    assert _report(_private()) == []


def test_rails_and_refunds_import_nothing_from_payouts() -> None:
    assert _report(_not_between()) == []


@pytest.mark.parametrize("entry", sorted(KNOWN), ids=lambda e: f"{e[0]}->{e[1]}")
def test_every_known_violation_is_still_there(entry: tuple[str, str]) -> None:
    # A stale entry would let the same import come back unnoticed: remove it from KNOWN.
    violations = _upward() + _cycles() + _private() + _not_between()
    assert entry in {(i.importer, i.target) for i in violations}
