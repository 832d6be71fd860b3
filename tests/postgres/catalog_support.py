"""Sessions for the PostgreSQL catalog's tests: real logs of varied shape (tenants, metadata,
experiment tags, lengths), and rows crafted to cover every filter and sort."""

from __future__ import annotations

import dataclasses
import random

from tether.events import Event, SessionCreated
from tether.messages import JSONObject
from tether.store.catalog import CatalogRow
from tether.testing.store_conformance import _sample, make_events

TENANTS = ("", "acme", "globex")


def session_log(session_id: str, rng: random.Random) -> list[Event]:
    """A log of 3 to 9 events that starts with a `session.created` carrying metadata."""
    metadata: JSONObject = {"env": rng.choice(["prod", "dev"]), "n": rng.randint(0, 3)}
    tenant = rng.choice(TENANTS)
    if tenant:
        metadata["tenant"] = tenant
    if rng.random() < 0.3:
        metadata["experiment"] = {"id": f"exp{rng.randint(1, 2)}", "variant": "a", "repeat": 0}
    created = SessionCreated(model=rng.choice(["m1", "m2"]), metadata=metadata)
    return make_events(session_id, 1, [created, *_sample(rng.randint(3, 9))[1:]])


def crafted_row(i: int, rng: random.Random) -> CatalogRow:
    """Row `i` (session `r{i:03d}`, last seq 1): every field a filter or sort looks at varied,
    with ties in each sort value so the id decides between them."""
    minute = rng.randint(0, 5)
    metadata = (("env", rng.choice(["prod", "dev", "50%_off"])), ("team", rng.choice("ab")))
    return CatalogRow(
        session_id=f"r{i:03d}",
        tenant=rng.choice(TENANTS),
        parent="",
        created=f"2026-01-01T00:0{minute}:00.000000Z",
        updated=f"2026-01-01T00:0{minute + rng.randint(0, 3)}:00.000000Z",
        state=rng.choice(["idle", "running", "completed", "failed"]),
        stop_reason=rng.choice([None, "end_turn", "max_steps"]),
        model=rng.choice(["m1", "m2"]),
        steps=rng.randint(0, 5),
        turns=rng.randint(0, 3),
        input_tokens=rng.choice([0, 10, 20]),
        output_tokens=rng.choice([0, 5]),
        cache_read_tokens=0,
        cache_write_tokens=0,
        cost_usd=rng.choice([None, 0.0, 0.5, 1.25]),
        task=rng.choice(["Summarise the REPORT", "fix bug_42", "plan a trip", ""]),
        last_output="done",
        metadata=metadata,
        experiment=rng.choice(["", "", "exp1", "exp2"]),
        variant="a",
        experiment_task="t",
        repeat=rng.choice([-1, 0, 1]),
        threads_running=0,
        last_seq=1,
    )


def at_seq(row: CatalogRow, seq: int) -> CatalogRow:
    return dataclasses.replace(row, last_seq=seq)
