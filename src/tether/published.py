"""Code a tenant may name: what the operator published, nothing else.

A spec sent to `tether serve` (and run by its workers) names code as `MODULE:NAME`: tools,
`python:` models, an experiment's checks. `Published` holds the operator's patterns and
resolves such a name only to what was published under it:

- a tool spec to a `Tool`, or a list or tuple of them;
- a `python:` model to a `Model` instance, or to a function of that module marked with
  `@model_factory` (then called); any other callable is refused without being called;
- a check (`--allow-check`, its own patterns) to a plain function defined in its module.

Each is a name the module defines, not one it imports (told apart by its source: an allowed
module's imports are not published with it). Names are checked before any import: a dotted
module path and one attribute, each a public name (no `_private`, no dunder, so no walk from
an allowed module to its globals). A module is read through its namespace, never through a
module `__getattr__`. A refusal names the type of what was found, never its value: a
module's globals stay the operator's.
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import importlib
import inspect
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeGuard, TypeVar, cast

from tether.errors import KeyMissing, UsageError
from tether.providers.base import Model
from tether.tools.base import Tool

log = logging.getLogger("tether.published")
F = TypeVar("F", bound=Callable[..., Any])
MARK = "__tether_model_factory__"
PUBLIC = r"[A-Za-z][A-Za-z0-9_]*"
REF = re.compile(rf"(?P<module>{PUBLIC}(\.{PUBLIC})*):(?P<name>{PUBLIC})", re.ASCII)


def model_factory(fn: F) -> F:
    """Mark a module-level function as one that makes a `Model`, so that a tenant's
    `python:MODULE:NAME` may call it (under an `--allow-code` pattern). Unmarked callables
    are never called for a tenant. The function is returned as it is."""
    if not inspect.isfunction(fn):
        raise UsageError(f"@model_factory marks a function, not {kind(fn)}")
    setattr(fn, MARK, True)
    return fn


def kind(value: object) -> str:
    """What a value is, by its type's name alone (its `repr` may hold anything): "a str"."""
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def split(ref: str, what: str) -> tuple[str, str]:
    """`MODULE:NAME` of public names, or a `UsageError` (before anything is imported)."""
    found = REF.fullmatch(ref)
    if found is None:
        raise UsageError(
            f"{what} {ref[:200]!r} is not MODULE:NAME of public names (a dotted module path "
            "and one attribute, neither starting with '_')"
        )
    return found["module"], found["name"]


@dataclass(frozen=True, slots=True)
class Published:
    """The operator's patterns (fnmatch, over `MODULE:NAME`): `code` for tools and `python:`
    models (`--allow-code`), `checks` for experiment checks (`--allow-check`)."""

    code: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()

    def permits_check(self, ref: str) -> bool:
        """Whether `ref` is `MODULE:NAME` of public names an `--allow-check` pattern allows."""
        return REF.fullmatch(ref) is not None and _matches(ref, self.checks)

    def allowed(self, ref: str, what: str, patterns: Sequence[str], flag: str) -> tuple[str, str]:
        """The module and name of `ref`, if its names are public and a pattern allows it."""
        module, name = split(ref, what)
        if not _matches(f"{module}:{name}", patterns):
            raise UsageError(
                f"{what} {ref[:200]!r} is not code this runtime may load (allowed: "
                f"{', '.join(patterns) or 'none'}; see tether serve {flag})"
            )
        return module, name

    def check_names(self, models: Sequence[str], tools: Sequence[str]) -> None:
        """Refuse, before importing any, a `python:` model or tool spec not allowed here."""
        for model in models:
            if model.startswith("python:"):
                self.allowed(model.removeprefix("python:"), "model", self.code, "--allow-code")
        for spec in tools:
            self.allowed(tool_ref(spec), "tool", self.code, "--allow-code")

    def tools(self, spec: str) -> list[Tool]:
        """The tools published under a tool spec (`MODULE:NAME`, or `MODULE` for its
        `tools`): a `Tool`, or a list or tuple of them, bound to a name the module defines."""
        module, name = self.allowed(tool_ref(spec), "tool", self.code, "--allow-code")
        value = _attribute(module, name, f"tool {spec}")
        items: list[object] = list(value) if isinstance(value, list | tuple) else [value]
        tools: list[Tool] = []
        for item in items:
            if not isinstance(item, Tool):
                found = kind(item) if item is value else f"{kind(value)} holding {kind(item)}"
                raise UsageError(
                    f"tool {spec}: {found}, not a Tool (publish a function as one with @tool)"
                )
            tools.append(item)
        return tools

    def model_source(self, spec: str) -> Model | Callable[[], object]:
        """What a `python:MODULE:NAME` spec names, checked and not called: a `Model`
        instance, or a function of that module marked `@model_factory`."""
        module, name = self.allowed(
            spec.removeprefix("python:"), "model", self.code, "--allow-code"
        )
        value = _attribute(module, name, f"model {spec}")
        if _is_model(value):
            return value
        if not (
            inspect.isfunction(value)
            and getattr(value, MARK, False) is True
            and value.__module__ == module
        ):
            raise UsageError(
                f"model {spec}: {kind(value)}, not a Model nor a function of {module} marked "
                "@tether.model_factory"
            )
        return cast(Callable[[], object], value)

    def model(self, spec: str) -> Model:
        """The model a `python:MODULE:NAME` spec names: a `Model` instance, or what a
        function of that module marked `@model_factory` makes."""
        value = self.model_source(spec)
        if _is_model(value):
            return value
        try:
            made = cast(Callable[[], object], value)()
        except KeyMissing as exc:
            raise unavailable(spec, exc) from None
        except Exception as exc:  # its message is the operator's business, not the tenant's
            log.warning("model %s: its factory raised", spec[:200], exc_info=True)
            raise UsageError(f"model {spec}: its factory failed ({type(exc).__name__})") from None
        if not _is_model(made):
            raise UsageError(f"model {spec}: its factory made {kind(made)}, not a Model")
        return made

    def check(self, ref: str) -> Callable[..., Any]:
        """The check `MODULE:NAME` names: a plain function defined in that module under that
        name, allowed by an `--allow-check` pattern."""
        module, name = self.allowed(ref, "check", self.checks, "--allow-check")
        value = _attribute(module, name, f"check {ref}")
        if not (
            inspect.isfunction(value) and value.__module__ == module and value.__qualname__ == name
        ):
            raise UsageError(f"check {ref}: {kind(value)}, not a function defined in {module}")
        return value


def unavailable(spec: str, exc: KeyMissing) -> UsageError:
    """What a tenant is told of a provider key this process lacks: not which key (the
    operator's log says)."""
    log.warning("a tenant's model %s is not available: %s", spec[:200], exc)
    return UsageError(f"model {spec[:200]!r}: this model is not available on this server")


def tool_ref(spec: str) -> str:
    """A tool spec as `MODULE:NAME` (a bare `MODULE` names its `tools`)."""
    return spec if ":" in spec else f"{spec}:tools"


def _matches(ref: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(ref, p) for p in patterns)


def _is_model(value: object) -> TypeGuard[Model]:
    return not inspect.isclass(value) and isinstance(value, Model)


def _attribute(module_name: str, name: str, what: str) -> object:
    """`name` from the module's own namespace (a module `__getattr__` is never run), if
    the module defines it rather than imports it."""
    module = _import(module_name, what)
    namespace = vars(module)
    if name not in namespace:
        raise UsageError(f"{what}: module {module_name} has no attribute {name!r}")
    if name not in _defined(module):
        raise UsageError(f"{what}: imported into {module_name}, not defined there")
    return namespace[name]


@functools.lru_cache(maxsize=256)
def _defined(module: ModuleType) -> frozenset[str]:
    """The names the module's top level binds itself: by `def`, `class` or an assignment (in
    `if`, `try` and `with` blocks too), not by `import` (a star import included). Without
    its source, which tells them apart, the module defines nothing a tenant may name."""
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError, SyntaxError):
        return frozenset()
    names: set[str] = set()
    statements: list[ast.stmt] = list(tree.body)
    while statements:
        statement = statements.pop()
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(statement.name)
        elif isinstance(statement, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            if isinstance(statement, ast.AnnAssign) and statement.value is None:
                continue  # an annotation alone binds nothing
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(statement, ast.If | ast.Try | ast.With):
            statements.extend(statement.body)
            statements.extend(getattr(statement, "orelse", []))
            statements.extend(getattr(statement, "finalbody", []))
            for handler in getattr(statement, "handlers", []):
                statements.extend(handler.body)
    return frozenset(names)


def _import(module_name: str, what: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise UsageError(f"{what}: no module named {exc.name!r}") from None
    except Exception as exc:  # its message is the operator's business, not the tenant's
        raise UsageError(f"{what}: {module_name} does not import ({type(exc).__name__})") from None
