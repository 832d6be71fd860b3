"""`tether experiment run SPEC` with tasks that replay recorded sessions (`from_session` and
`at`): the runs pair by source session, and the report says so, from the store alone too."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from experiment.test_cli import as_json, tether
from replaying import Kit, record
from tether.store import SQLiteStore

SPEC = """
runs = 1
seed = 2

[variants.same]
model = "python:replaying:same_model"
tools = ["replaying:tools"]

[variants.curious]
model = "python:replaying:curious_model"
tools = ["replaying:tools"]
"""


async def _recorded(db: Path, count: int) -> list[str]:
    store = SQLiteStore(str(db))
    try:
        return [await record(store, Kit(), n, 2) for n in range(count)]
    finally:
        await store.close()


def test_a_spec_replays_recorded_sessions_paired_by_source(tmp_path: Path) -> None:
    sources = asyncio.run(_recorded(tmp_path / "e.db", 6))
    tasks = "".join(
        f'\n[[tasks]]\nfrom_session = "{s}"\nat = {{ turn = 2 }}\ncheck = "replaying:found"\n'
        for s in sources
    )
    (tmp_path / "replay.toml").write_text(SPEC + tasks)
    report = as_json(tether("run", "replay.toml", "--id", "rp", "--json", cwd=tmp_path))

    assert {r["source"] for r in report["runs"]} == set(sources)
    assert {(r["task"], r["variant"]) for r in report["runs"]} == {
        (f"{s}@turn2", v) for s in sources for v in ("same", "curious")
    }
    [comparison] = report["comparisons"]
    assert comparison["paired_by"] == "source session" and comparison["pairs"] == 6
    # `curious` fails where it notes (sessions 0 and 3): 2 of 6 pairs differ.
    assert comparison["difference"] == pytest.approx(2 / 6)
    again = as_json(tether("compare", "rp", "same", "curious", "--json", cwd=tmp_path))
    assert again == comparison
    text = tether("compare", "rp", "same", "curious", cwd=tmp_path).stdout
    assert "6 pair(s) by (source session, repeat)" in text
