"""Code a tenant may name on a real `tether serve`: only what the operator published under
its `--allow-code` patterns. Under a pattern that allows a whole module, a dunder, a private
name, an imported module or tool, a typed helper and a plain value are refused as tools
without their values in the answer; a `python:` model that is no `Model` and no function
marked `@model_factory` is refused without being called (a mark it would leave stays
absent). `tether worker` holds the sessions it takes to its own patterns."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from server.support import ACME, Server, serve, settled, start_worker, stop_worker

HEADERS = {"authorization": f"Bearer {ACME}"}
SECRET = "sk-published-module-secret"
PRIVATE = "private-module-secret"
# On the server's path; each call that a tenant must never cause leaves a mark.
PUBLISHED = f'''
import os
from pathlib import Path

from tether import model_factory, tool
from tether.demo import save_plan
from tether.testing import ScriptedModel

API_KEY = "{SECRET}"
_PRIVATE = "{PRIVATE}"


def _mark(what):
    (Path(os.environ["PUB_MARKS"]) / what).write_text("")


def helper(city: str) -> str:
    """A typed helper of the module: no tool."""
    _mark("helper-called")
    return API_KEY


def not_a_model():
    _mark("not-a-model-called")
    return ScriptedModel(["unmarked"], name="scripted:unmarked")


class Maker:
    name = "scripted:maker"

    def __init__(self):
        _mark("maker-called")

    async def complete(self, request):
        raise NotImplementedError


@model_factory
def model():
    return ScriptedModel(["published"], repeat_last=True, name="scripted:published")


@tool(effect="read")
def lookup(key: str) -> str:
    """Look a key up."""
    return f"looked up {{key}}"


tools = [lookup]
'''
REFUSED_TOOLS = {
    "pub_mod:__dict__": "is not MODULE:NAME of public names",
    "pub_mod:__file__": "is not MODULE:NAME of public names",
    "pub_mod:_PRIVATE": "is not MODULE:NAME of public names",
    "pub_mod:model.__globals__": "is not MODULE:NAME of public names",
    "pub_mod:os": "imported into pub_mod, not defined there",
    "pub_mod:save_plan": "imported into pub_mod, not defined there",
    "pub_mod:helper": "a function, not a Tool",
    "pub_mod:API_KEY": "a str, not a Tool",
    "pub_mod:model": "a function, not a Tool",
    "pub_mod:nothing": "module pub_mod has no attribute 'nothing'",
    "os:system": "is not code this runtime may load",
}
REFUSED_MODELS = {
    "python:pub_mod:not_a_model": "a function, not a Model nor a function of pub_mod marked",
    "python:pub_mod:helper": "a function, not a Model",
    "python:pub_mod:Maker": "a type, not a Model",
    "python:pub_mod:API_KEY": "a str, not a Model",
    "python:pub_mod:os": "imported into pub_mod, not defined there",
    "python:pub_mod:__dict__": "is not MODULE:NAME of public names",
}


@pytest.fixture
def published(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """The server's environment (the module on its path) and the folder of marks."""
    (tmp_path / "pub_mod.py").write_text(PUBLISHED)
    marks = tmp_path / "marks"
    marks.mkdir()
    return {"PYTHONPATH": str(tmp_path), "PUB_MARKS": str(marks)}, marks


@pytest.fixture
def server(tmp_path: Path, published: tuple[dict[str, str], Path]) -> Iterator[Server]:
    env, _ = published
    with serve(tmp_path, "--workers", "1", "--allow-code", "pub_mod:*", env=env) as server:
        yield server


async def start(client: httpx.AsyncClient, model: str, tools: list[str]) -> httpx.Response:
    body = {"model": model, "task": "go", "tools": tools, "end_after_turn": True}
    return await client.post("/v1/sessions", headers=HEADERS, json=body)


def no_values(text: str, folder: Path) -> None:
    """Nothing of the module's values, its file or any object's `repr` in `text`."""
    for leak in (SECRET, PRIVATE, str(folder), "pub_mod.py", "0x", "<function", "<module"):
        assert leak not in text, (leak, text)


async def test_only_published_tools_and_models_load_and_refusals_show_no_values(
    server: Server, tmp_path: Path, published: tuple[dict[str, str], Path]
) -> None:
    _, marks = published
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        for spec, why in REFUSED_TOOLS.items():
            refused = await start(client, "python:pub_mod:model", [spec])
            assert refused.status_code == 422, (spec, refused.text)
            error = refused.json()["error"]
            assert error["code"] == "invalid_spec" and why in error["message"], (spec, error)
            no_values(refused.text, tmp_path)
        for spec, why in REFUSED_MODELS.items():
            refused = await start(client, spec, [])
            assert refused.status_code == 422, (spec, refused.text)
            error = refused.json()["error"]
            assert error["code"] == "invalid_spec" and why in error["message"], (spec, error)
            no_values(refused.text, tmp_path)
        assert sorted(p.name for p in marks.iterdir()) == []  # nothing was called

        # What the operator published does load: a marked factory, a list of tools, the
        # module's `tools` by the module's name alone.
        for tools in (["pub_mod:tools"], ["pub_mod"], ["pub_mod:lookup"]):
            started = await start(client, "python:pub_mod:model", tools)
            assert started.status_code == 201, started.text
            status = await settled(client, started.json()["session_id"])
            assert status["state"] == "completed" and status["last_output"] == "published"

        # The start form offers exactly what a start loads.
        options = (await client.get("/v1/start-options", headers=HEADERS)).json()
        offered = [t["spec"] for t in options["tools"] if t["spec"].startswith("pub_mod")]
        assert offered == ["pub_mod:lookup", "pub_mod:tools"]
        # ... and the models it publishes, found without calling anything (no mark is left).
        (python,) = [g for g in options["models"] if g["provider"] == "python"]
        assert [m for m in python["models"] if "pub_mod" in m] == ["python:pub_mod:model"]
    assert sorted(p.name for p in marks.iterdir()) == []


async def test_tether_worker_runs_only_sessions_whose_code_its_own_patterns_allow(
    tmp_path: Path, published: tuple[dict[str, str], Path]
) -> None:
    env, marks = published
    allow = ("--workers", "0", "--allow-code", "pub_mod:*")
    with serve(tmp_path, *allow, env=env) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            # A worker whose patterns do not name pub_mod: it fails the session, never runs it.
            strict = start_worker(server.store, env=env)
            try:
                started = await start(client, "python:pub_mod:model", ["pub_mod:tools"])
                assert started.status_code == 201, started.text
                failed = await settled(client, started.json()["session_id"])
            finally:
                stop_worker(strict)
            assert failed["state"] == "failed", failed
            assert "'pub_mod:model' is not code this runtime may load" in str(failed), failed

            # A worker the operator gave the same patterns as the server runs the next one.
            same = start_worker(server.store, "--allow-code", "pub_mod:*", env=env)
            try:
                started = await start(client, "python:pub_mod:model", ["pub_mod:tools"])
                done = await settled(client, started.json()["session_id"])
            finally:
                stop_worker(same)
            assert done["state"] == "completed" and done["last_output"] == "published", done
    assert sorted(p.name for p in marks.iterdir()) == []
