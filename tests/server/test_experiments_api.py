"""`GET /v1/experiments`, `/v1/experiments/{id}` and its `chart.svg` over a real `tether
serve`: a tenant sees only experiments run in its own sessions (another's is a 404 that
names nothing of it); a check the operator's --allow-check does not allow, or that is not a
plain public function defined in its module (a tool's raw function, say), is never imported
nor called on the server, and its runs' pass and score are unknown while their figures show;
an allowed check runs off the event loop, within a time limit; whatever a log names reaches
the chart escaped, and the chart runs no script."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from experiment.fixtures import fetcher, flaky
from server.support import ACME, GLOBEX, Server, check_documented, serve
from tether import Agent
from tether.experiment import Task, run_matrix
from tether.experiment.plan import Check, import_check
from tether.published import Published
from tether.server import checks
from tether.server.checks import NOT_RUN
from tether.server.experiments import LISTED_EXPERIMENTS, SVG_CSP
from tether.store import open_store
from tether.store.base import Store
from tether.testing import ScriptedModel

# Checks the server may run (`--allow-check exp_allowed:*`): each call leaves a mark in
# $EXP_MARKS, which only the server's environment sets, so a mark is the server's doing.
# Under the same pattern: a write tool (its raw function leaves an `evil` mark), a private
# function and an imported one, none of which is a check the server may call.
ALLOWED = """
import os
import time
from os.path import join
from pathlib import Path

from tether import tool


def _mark(what):
    if os.environ.get("EXP_MARKS"):
        (Path(os.environ["EXP_MARKS"]) / what).write_text("")


def said_ok(result):
    _mark("allowed-called")
    return result.output == "ok"


def slow(result):
    _mark("slow-called")
    time.sleep(8)
    return True


@tool(effect="write")
def write_mark(what: str) -> str:
    \"\"\"Write a mark down.\"\"\"
    _mark("evil-tool-fn-called")
    return what


def _private(result):
    _mark("evil-private-called")
    return True
"""
# Checks no pattern allows: importing the module or calling the check leaves a mark.
EVIL = """
import os
from pathlib import Path


def _mark(what):
    if os.environ.get("EXP_MARKS"):
        (Path(os.environ["EXP_MARKS"]) / f"evil-{what}").write_text("")


_mark("imported")


def writes_mark(result):
    _mark("called")
    return True
"""
HOSTILE = "<script>alert(1)</script>\"&'"
# Checks a log may name under an allowed pattern that are not plain functions defined there:
# a tool's raw function, the tool itself, a private function, an imported one, a dunder.
FORGED_UNDER_A_PATTERN = (
    "tether.demo:save_plan.fn",
    "exp_allowed:write_mark.fn",
    "exp_allowed:write_mark",
    "exp_allowed:_private",
    "exp_allowed:join",
    "exp_allowed:__dict__",
)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def tenant_pair(store: Store, tenant: str, rates: tuple[float, float]) -> dict[str, Agent]:
    """Variants `a` and `b` whose runs belong to `tenant`, as a runtime records a tenant."""
    return {
        name: Agent(fetcher(), tools=[flaky(rate, 1)], store=store, metadata={"tenant": tenant})
        for name, rate in zip("ab", rates, strict=True)
    }


async def forged_run(
    store: Store, tenant: str, variant: str, check: str | None, *, runs: int = 1, id: str = "forged"
) -> None:
    """A session tagged by hand, as any writer of a log could tag it: names `run_matrix`
    would refuse, a check of the writer's choosing, and as many `runs` as it likes."""
    plan = {"variants": [variant], "tasks": [{"name": HOSTILE, "check": check}], "runs": runs}
    tag = {"id": id, "variant": variant, "task": HOSTILE, "repeat": 0, "plan": plan}
    agent = Agent(
        ScriptedModel(["done"]), store=store, metadata={"tenant": tenant, "experiment": tag}
    )
    await agent.run("do it", end_session=True)


@pytest.fixture(scope="module")
def marks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("marks")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, marks: Path) -> Iterator[Server]:
    """A server with no worker, whose --allow-check allows `exp_allowed:*` and `tether.demo:*`
    and nothing of `exp_evil`; both modules are on its path (and this process's, to run the
    experiments)."""
    directory = tmp_path_factory.mktemp("serve")
    (directory / "exp_allowed.py").write_text(ALLOWED)
    (directory / "exp_evil.py").write_text(EVIL)
    sys.path.insert(0, str(directory))
    env = {"PYTHONPATH": str(directory), "EXP_MARKS": str(marks)}
    try:
        allow = ("--allow-check", "exp_allowed:*", "--allow-check", "tether.demo:*")
        with serve(directory, "--workers", "0", *allow, env=env) as s:
            yield s
    finally:
        sys.path.remove(str(directory))


@pytest.fixture(scope="module")
def experiments(server: Server) -> dict[str, Any]:
    """Run in this process, in the server's store: acme's `shared` (a passes, b fails) and
    `unallowed` (a check the server may not run), globex's `secret` and its own `shared`,
    and acme's `forged` (hostile names)."""
    return asyncio.run(run_experiments(server))


async def run_experiments(server: Server) -> dict[str, Any]:
    said_ok: Check = import_check("exp_allowed:said_ok")
    writes_mark: Check = import_check("exp_evil:writes_mark")
    store = open_store(server.store)
    try:
        fetch = [Task("Fetch the answer.", check=said_ok, name="fetch")]
        shared = await run_matrix(
            tenant_pair(store, "acme", (1.0, 0.0)), fetch, 4, experiment_id="shared"
        )
        await run_matrix(
            tenant_pair(store, "acme", (1.0, 0.0)), [Task("Fetch.", check=writes_mark, name="t")], 2,
            experiment_id="unallowed",
        )  # fmt: skip
        await run_matrix(tenant_pair(store, "globex", (0.5, 0.5)), fetch, 2, experiment_id="secret")
        globex_variant = {"zed": tenant_pair(store, "globex", (1.0, 1.0))["a"]}
        await run_matrix(globex_variant, fetch, 1, experiment_id="shared")
        await forged_run(store, "acme", "v", None, runs=10**12, id="huge")
        await forged_run(store, "acme", HOSTILE, "exp_evil:writes_mark")
        for ref in FORGED_UNDER_A_PATTERN:
            await forged_run(store, "acme", "v", ref, id=f"reach-{ref.replace(':', '-')}")
        await forged_run(store, "acme", "v", "exp_allowed:slow", runs=1, id="slow")
        return {"shared": shared}
    finally:
        await store.close()


async def get(server: Server, path: str, token: str = ACME) -> httpx.Response:
    async with httpx.AsyncClient(base_url=server.url, headers=auth(token)) as client:
        return await client.get(path)


async def test_a_tenant_lists_only_the_experiments_run_in_its_own_sessions(
    server: Server, experiments: dict[str, Any]
) -> None:
    listed = (await get(server, "/v1/experiments")).json()
    check_documented(listed, "ExperimentList")
    by_id = {e["experiment_id"]: e for e in listed["experiments"]}
    reaches = {f"reach-{ref.replace(':', '-')}" for ref in FORGED_UNDER_A_PATTERN}
    assert set(by_id) == {"shared", "unallowed", "forged", "huge", "slow", *reaches}
    assert by_id["shared"]["variants"] == ["a", "b"] and by_id["shared"]["tasks"] == ["fetch"]
    assert by_id["shared"]["runs"] == 8  # acme's runs only: globex's `shared` is not counted
    assert listed["experiments"][0]["experiment_id"] == "slow"  # the newest first
    assert listed["bounds"] == {"limit": LISTED_EXPERIMENTS, "complete": True}

    theirs = (await get(server, "/v1/experiments", GLOBEX)).json()
    assert {e["experiment_id"] for e in theirs["experiments"]} == {"secret", "shared"}
    assert (await get(server, "/v1/experiments", "no-such-token-000000")).status_code == 401


async def test_another_tenants_experiment_is_a_404_that_names_nothing_of_it(
    server: Server, experiments: dict[str, Any]
) -> None:
    for path in ("/v1/experiments/secret", "/v1/experiments/secret/chart.svg"):
        refused = await get(server, path)
        assert refused.status_code == 404, refused.text
        error = refused.json()["error"]
        assert error["code"] == "experiment_not_found"
        # Exactly what an id nobody used gets: no variant, count or cost of globex's.
        unknown = (await get(server, path.replace("secret", "never-run"))).json()["error"]
        assert error["message"] == unknown["message"].replace("never-run", "secret")
    # Both tenants ran an experiment named `shared`: each sees its own runs of it, no more.
    mine = (await get(server, "/v1/experiments/shared")).json()
    theirs = (await get(server, "/v1/experiments/shared", GLOBEX)).json()
    assert {r["variant"] for r in mine["runs"]} == {"a", "b"} and len(mine["runs"]) == 8
    assert {r["variant"] for r in theirs["runs"]} == {"zed"} and len(theirs["runs"]) == 1
    assert not {r["session_id"] for r in mine["runs"]} & {r["session_id"] for r in theirs["runs"]}


async def test_an_allowed_check_runs_and_each_variant_is_compared_with_the_first(
    server: Server, experiments: dict[str, Any], marks: Path
) -> None:
    report = (await get(server, "/v1/experiments/shared")).json()
    check_documented(report, "ExperimentReport")
    assert report["checks"] == {"fetch": "run"}
    assert (marks / "allowed-called").exists()  # the server ran it: the control of the marks
    a, b = report["variants"]["a"], report["variants"]["b"]
    assert (a["passed"], a["runs"], b["passed"], b["runs"]) == (4, 4, 0, 4)
    assert a["pass_interval"]["low"] > 0.4 and b["pass_interval"]["high"] < 0.6
    live = experiments["shared"]
    assert report["variants"] == {v: live.variant(v).to_json() for v in ("a", "b")}
    verdicts = {c["metric"]: c["verdict"] for c in report["comparisons"]}
    assert verdicts["pass_rate"] == "worse"  # b against a
    assert all(c["a"] == "b" and c["b"] == "a" for c in report["comparisons"])
    # Each run names its session, which the tenant can open.
    session = report["runs"][0]["session_id"]
    assert (await get(server, f"/v1/sessions/{session}")).status_code == 200
    assert (await get(server, f"/v1/sessions/{session}", GLOBEX)).status_code == 404


async def test_a_check_the_operator_did_not_allow_is_never_imported_nor_called(
    server: Server, experiments: dict[str, Any], marks: Path
) -> None:
    for experiment in ("unallowed", "forged"):
        report = (await get(server, f"/v1/experiments/{experiment}")).json()
        assert list(report["checks"].values()) == [NOT_RUN]
        for summary in report["variants"].values():
            assert summary["pass_rate"] is None and summary["pass_interval"] is None
            assert summary["unchecked"] == summary["runs"] > 0
            assert summary["metrics"]["score"] is None
            assert summary["metrics"]["steps"]["mean"] >= 1  # the figures still show
        assert all(r["passed"] is None and r["score"] is None for r in report["runs"])
        chart = await get(server, f"/v1/experiments/{experiment}/chart.svg")
        assert chart.status_code == 200 and " · steps · " in chart.text
        # Any metric of the report on asking; an unknown one is refused, named.
        tokens = await get(server, f"/v1/experiments/{experiment}/chart.svg?metric=tokens")
        assert tokens.status_code == 200 and " · tokens · " in tokens.text
        wrong = await get(server, f"/v1/experiments/{experiment}/chart.svg?metric=vibes")
        assert wrong.status_code == 422
        assert "query parameter metric must be one of pass_rate" in wrong.json()["error"]["message"]
    assert evil_marks(marks) == []


def evil_marks(marks: Path) -> list[str]:
    return sorted(p.name for p in marks.iterdir() if p.name.startswith("evil"))


async def test_names_from_a_log_reach_the_chart_as_text_and_the_chart_runs_no_script(
    server: Server, experiments: dict[str, Any]
) -> None:
    chart = await get(server, "/v1/experiments/forged/chart.svg")
    assert chart.headers["content-type"] == "image/svg+xml"
    assert chart.headers["content-security-policy"] == SVG_CSP
    assert chart.headers["x-content-type-options"] == "nosniff"
    assert "<script>" not in chart.text and "&lt;script&gt;" in chart.text
    root = ET.fromstring(chart.text)  # well-formed XML
    svg = "{http://www.w3.org/2000/svg}"
    assert [e for e in root.iter() if e.tag in (f"{svg}script", "script")] == []
    texts = [e.text for e in root.iter(f"{svg}text")]
    assert HOSTILE in texts  # the name, whole, as text
    assert set(root.iter()) == {
        e for e in root.iter() if not any(a.startswith("on") for a in e.attrib)
    }
    report = (await get(server, "/v1/experiments/forged")).json()
    assert report["plan"]["variants"] == [HOSTILE]  # JSON carries it as it is


async def test_a_plan_too_large_to_report_on_is_refused_not_expanded(
    server: Server, experiments: dict[str, Any]
) -> None:
    # Its plan claims 10**12 runs: the grid of cells is never built.
    for path in ("/v1/experiments/huge", "/v1/experiments/huge/chart.svg"):
        refused = await get(server, path)
        assert refused.status_code == 422, refused.text
        assert "larger than the server reports on" in refused.json()["error"]["message"]


async def test_a_check_under_an_allowed_pattern_that_is_no_plain_function_is_never_called(
    server: Server, experiments: dict[str, Any], marks: Path
) -> None:
    # A tool's raw function (a `write` tool's: the forgery the review found), the tool, a
    # private function, an imported one, a dunder: each unknown, none called.
    for ref in FORGED_UNDER_A_PATTERN:
        report = (await get(server, f"/v1/experiments/reach-{ref.replace(':', '-')}")).json()
        (decided,) = report["checks"].values()
        assert decided.startswith("not run on the server"), (ref, decided)
        assert all(r["passed"] is None and r["score"] is None for r in report["runs"]), ref
        assert "<" not in decided and "0x" not in decided, decided  # a type named, no repr
    assert evil_marks(marks) == []


async def test_an_allowed_check_runs_off_the_event_loop_and_is_stopped_at_its_limit(
    server: Server, experiments: dict[str, Any], marks: Path
) -> None:
    async with httpx.AsyncClient(base_url=server.url, headers=auth(ACME), timeout=60) as client:
        report = asyncio.create_task(client.get("/v1/experiments/slow"))
        while not (marks / "slow-called").exists():  # the check is running in the server now
            assert not report.done(), report.result().text
            await asyncio.sleep(0.01)
        began = time.monotonic()
        health = await client.get("/healthz")
        assert health.status_code == 200 and time.monotonic() - began < 1.0
        assert not report.done()  # the check still runs, in its thread
        answered = (await report).json()
    (decided,) = answered["checks"].values()
    assert decided == f"stopped on the server: it took longer than {checks.SECONDS:g} s on a run"
    (run,) = answered["runs"]
    assert run["passed"] is False and "TimeoutError" in run["check_error"]


async def test_the_server_resolves_only_a_plain_allowed_check_defined_where_it_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "exp_reach.py").write_text("import os\n\ndef fine(result):\n    return True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code = Published(checks=("exp_reach:*", "exp_absent:*"))
    refs = ["exp_reach:fine", "exp_reach:os", "exp_reach:fine.__globals__", "exp_reach:_x"]
    found, decided = await checks.resolve(code, [*refs, "os:system", "exp_absent:check"])
    assert list(found) == ["exp_reach:fine"] and decided["exp_reach:fine"] == "run"
    # The pattern matches each of these, and none is run: an imported module, a walk
    # through an attribute, a private name.
    for ref in refs[1:]:
        assert decided[ref].startswith("not run on the server"), ref
    assert decided["exp_reach:os"].endswith("imported into exp_reach, not defined there")
    assert decided["os:system"] == NOT_RUN
    assert (
        decided["exp_absent:check"]
        == "not run on the server: check exp_absent:check: no module named 'exp_absent'"
    )
    # No --allow-check (or a library's runtime that allows any code): no check runs.
    for nothing in (Published(code=("exp_reach:*",)), None):
        found, decided = await checks.resolve(nothing, ["exp_reach:fine"])
        assert found == {} and decided == {"exp_reach:fine": NOT_RUN}


async def test_check_threads_are_bounded_and_one_that_overruns_is_left_behind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(checks, "_alive", threading.BoundedSemaphore(1))
    release = threading.Event()
    # It overruns its limit: the caller is told so, and its thread keeps the only place.
    with pytest.raises(TimeoutError):
        await checks.in_thread(lambda: release.wait(30), seconds=0.05)
    with pytest.raises(checks.Busy, match="check threads are all taken"):
        await checks.in_thread(lambda: True)
    release.set()  # it ends on its own and gives its place back
    async with asyncio.timeout(10):
        while True:
            try:
                assert await checks.in_thread(lambda: 42) == 42
                break
            except checks.Busy:
                await asyncio.sleep(0.01)
    # What a check raises reaches the caller as itself; a SystemExit does not end the server.
    with pytest.raises(ValueError, match="bad check"):
        await checks.in_thread(lambda: (_ for _ in ()).throw(ValueError("bad check")))
    with pytest.raises(RuntimeError, match="SystemExit raised"):
        await checks.in_thread(lambda: sys.exit(3))
