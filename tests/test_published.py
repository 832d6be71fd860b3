"""`tether.published`: what a name a tenant wrote resolves to, module shapes included that a
server test does not build (a star import, a rebinding, names bound in blocks, a module
without source). Through a real server: `tests/server/test_published_code.py`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tether import model_factory
from tether.errors import UsageError
from tether.published import Published

MODULE = '''
from tether import tool
from tether.demo import *
from tether.demo import forecast as borrowed
from tether.testing import ScriptedModel

if True:
    @tool(effect="read")
    def in_a_block(x: int) -> str:
        """In an if block."""
        return str(x)

try:
    first, second = [in_a_block], (in_a_block,)
except Exception:
    pass

borrowed_again = borrowed  # an explicit binding: published by the module itself
annotated: list
instance = ScriptedModel(["an instance"], name="scripted:instance")
'''
CODE = Published(("shapes:*", "tether.demo:*"))


@pytest.fixture(autouse=True)
def shapes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "shapes.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("shapes", None)


def refused(spec: str, load: str = "tools") -> str:
    with pytest.raises(UsageError) as caught:
        getattr(CODE, load)(spec)
    return str(caught.value)


def test_names_a_module_binds_itself_load_and_imported_ones_do_not() -> None:
    for spec in ("shapes:in_a_block", "shapes:first", "shapes:second", "shapes:borrowed_again"):
        assert [t.name for t in CODE.tools(spec)] in (["in_a_block"], ["forecast"]), spec
    # Star-imported, imported under another name, annotated only: not defined here.
    for spec in ("shapes:save_plan", "shapes:borrowed", "shapes:tool"):
        assert refused(spec).endswith("imported into shapes, not defined there"), spec
    assert "has no attribute 'annotated'" in refused("shapes:annotated")
    assert CODE.model("python:shapes:instance").name == "scripted:instance"


def test_a_module_without_source_publishes_nothing(tmp_path: Path) -> None:
    # The compiled module alone: which of its names are its own cannot be told.
    import py_compile

    source = tmp_path / "compiled_only.py"
    source.write_text("from tether import tool\n\n@tool\ndef t(x: int) -> str:\n    return ''\n")
    py_compile.compile(str(source), cfile=str(tmp_path / "compiled_only.pyc"))
    source.unlink()
    try:
        code = Published(("compiled_only:*",))
        with pytest.raises(UsageError, match="not defined there"):
            code.tools("compiled_only:t")
    finally:
        sys.modules.pop("compiled_only", None)


def test_model_factory_marks_functions_only() -> None:
    with pytest.raises(UsageError, match="marks a function, not a type"):
        model_factory(Published)  # type: ignore[type-var]
