"""The package's layers point one way: core → pieces → session → runtime → edges (the HTTP
server and the command line). A module imports only from its own layer or lower ones, lazy
imports inside functions included (those under `if TYPE_CHECKING:` are types only); and no
two modules import each other at module level, directly or around a cycle."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"

# Longest prefix wins. Core is pure: the neutral messages, the events and their fold.
LAYERS: dict[str, tuple[str, ...]] = {
    "core": (
        "tether.errors",
        "tether.messages",
        "tether.events",
        "tether.state",
        "tether.fold",
        "tether.snapshot",  # a fold as bytes and back
        "tether.limits",
        "tether.settings",
        "tether.stops",
        "tether.bounded",
    ),
    "pieces": (
        "tether.providers",
        "tether.documents",  # JSON and TOML that users write, read with bounds
        "tether.published",  # what a tenant may name: the code the operator published
        "tether.tools",
        "tether.context",
        "tether.scheduler",
        "tether.store",
        "tether.recovery",
        "tether.eager",
        "tether.session.log",
        "tether.session.snapshots",  # where a take-up's fold starts; writing snapshots
        "tether.session.lease",
        "tether.session.blips",
        "tether.session.watch",
        "tether.session.tail",
        "tether.retrying",
        "tether.process",
        "tether.render",
        "tether.testing.scripted",  # the scripted model: a Model like any provider's
        "tether.output",  # structured output: a validator, a schema and the final-answer tool
        "tether.telemetry",  # spans from events; the live emitter a session log is given
    ),
    "session": (
        "tether.session",
        "tether.loop",
        "tether.agent",
        "tether.session.control",
        "tether.demo",
    ),
    "runtime": ("tether.runtime", "tether.experiment", "tether.review", "tether.testing"),
    "edges": ("tether.server", "tether.cli", "tether.__main__", "tether"),
}
ORDER = list(LAYERS)


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in SRC.rglob("*.py")}


def layer(module: str) -> str:
    best = max(
        (
            (len(prefix), name)
            for name, prefixes in LAYERS.items()
            for prefix in prefixes
            if module == prefix or module.startswith(prefix + ".")
        ),
        default=None,
    )
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best[1]


def imports(module: str) -> Iterator[tuple[str, bool]]:
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    yield from imports_in(path.read_text(encoding="utf-8"), package)


def imports_in(source: str, package: str) -> Iterator[tuple[str, bool]]:
    """(imported tether module, at module level?) for each import outside TYPE_CHECKING."""

    def walk(node: ast.AST, top: bool) -> Iterator[tuple[str, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and ast.unparse(child.test) == "TYPE_CHECKING":
                yield from (i for s in child.orelse for i in walk(ast.Module([s], []), top))
                continue
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                yield from walk(child, False)
                continue
            if isinstance(child, ast.Import):
                yield from ((a.name, top) for a in child.names if a.name.startswith("tether"))
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package.rsplit(".", child.level - 1)[0] if child.level > 1 else package
                    base = f"{up}.{base}" if base else up
                if base.startswith("tether"):
                    for alias in child.names:
                        full = f"{base}.{alias.name}"
                        yield (full if full in MODULES else base), top
            yield from walk(child, top)

    yield from walk(ast.parse(source), True)


def test_every_module_sits_in_a_layer() -> None:
    assert len(MODULES) > 50
    for module in MODULES:
        layer(module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_from_a_higher_layer(module: str) -> None:
    mine = ORDER.index(layer(module))
    upward = [
        f"{imported} ({layer(imported)})"
        for imported, _ in imports(module)
        if ORDER.index(layer(imported)) > mine
    ]
    assert not upward, f"{module} ({layer(module)}) imports from higher layers: {upward}"


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    done: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            cycles.append([*path[path.index(module) :], module])
            return
        if module in done:
            return
        for imported in sorted(graph[module]):
            visit(imported, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
    return cycles


def test_no_import_cycles_at_module_level() -> None:
    graph = {
        module: {i for i, top in imports(module) if top and i in MODULES and i != module}
        for module in MODULES
    }
    cycles = find_cycles(graph)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles[:5])


def test_the_checks_see_lazy_imports_skip_type_only_ones_and_find_cycles() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "from tether import events\n"
        "if TYPE_CHECKING:\n    from tether.cli import main\n"
        "def f():\n    from tether.server.app import create_app\n"
        "from . import fold\n"
    )
    assert list(imports_in(source, "tether.runtime")) == [
        ("tether.events", True),
        ("tether.server.app", False),
        ("tether.runtime", True),  # `from . import fold` in tether.runtime: its own package
    ]
    assert layer("tether.server.app") == "edges" and layer("tether.events") == "core"
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []
