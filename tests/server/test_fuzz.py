"""Fuzzing the HTTP API from its own OpenAPI document with schemathesis, against a real
`tether serve`: no 5xx; every refused request gets a 4xx envelope with a stable code and a
message; nothing stored changes when a request is refused. Bounded and deterministic."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from server.support import ACME, Server, serve
from tether.server.errors import CODES
from tether.server.schemas import openapi

SCHEMA = schemathesis.openapi.from_dict(openapi())
OPERATIONS = [result.ok() for result in SCHEMA.get_all_operations()]
EXAMPLES = 25  # per operation and mode: enough to find the edges, small enough for CI
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


@pytest.fixture(scope="module")
def quiet_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    """No workers: only the fuzzer's requests change the store. One session, ended, whose
    id the fuzzer also uses, so requests reach real session code too."""
    directory: Path = tmp_path_factory.mktemp("fuzz")
    with serve(directory, "--workers", "0") as server:
        headers = {"Authorization": f"Bearer {ACME}"}
        body = {"model": "python:tether.testing.runtime_fixtures:model", "task": "echo fuzz"}
        made = httpx.post(f"{server.url}/v1/sessions", json=body, headers=headers)
        session_id = made.json()["session_id"]
        httpx.post(f"{server.url}/v1/sessions/{session_id}/cancel", headers=headers)
        yield server, session_id


def fingerprint(store: str) -> tuple[Any, ...]:
    with sqlite3.connect(store.removeprefix("sqlite:///")) as conn:
        return (
            conn.execute("SELECT count(*), coalesce(sum(seq), 0) FROM events").fetchone(),
            conn.execute("SELECT count(*) FROM sessions").fetchone(),
            conn.execute("SELECT count(*), coalesce(sum(token), 0) FROM wakeups").fetchone(),
        )


def check_refusal(response: Any) -> None:
    body = response.json()
    error = body["error"]
    assert error["code"] in CODES, error
    assert CODES[error["code"]][0] == response.status_code == error["status"], error
    assert len(error["message"]) >= 10, error


def _valid_timeout(value: object) -> bool:
    """What the server takes as a stream's `timeout`: a number in (0, 3600]."""
    try:
        return 0 < float(str(value)) <= 3600
    except ValueError:
        return False


def _negative(case: Any, location: str) -> bool:
    """Whether the fuzzer made this part of the request (`header`, `query`...) the invalid one."""
    components = getattr(case.meta, "components", None) or {}
    return any(
        getattr(where, "value", where) == location and info.mode is GenerationMode.NEGATIVE
        for where, info in components.items()
    )


def _has_inputs(operation: Any) -> bool:
    return bool(list(operation.iter_parameters())) or bool(operation.body)


CASES = [
    pytest.param(op, mode, id=f"{op.label} {mode.value}")
    for op in OPERATIONS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if mode is GenerationMode.POSITIVE or _has_inputs(op)  # nothing to make invalid otherwise
]


@pytest.mark.parametrize(("operation", "mode"), CASES)
def test_the_api_refuses_bad_input_with_a_4xx_and_changes_nothing(
    quiet_server: tuple[Server, str], operation: Any, mode: GenerationMode
) -> None:
    server, session_id = quiet_server
    known = {"session_id": session_id} if "{session_id}" in operation.path else None
    strategy = st.one_of(
        operation.as_strategy(generation_mode=mode),
        operation.as_strategy(generation_mode=mode, path_parameters=known)
        if known
        else st.nothing(),
    )

    @given(case=strategy)
    @settings(
        max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
        suppress_health_check=list(HealthCheck),
    )  # fmt: skip
    def run(case: Any) -> None:
        before = fingerprint(server.store)
        headers = dict(case.headers or {})
        if not _negative(case, "header"):
            # The token the server needs; a case whose headers are the invalid part keeps its
            # own (often none): adding one could make it valid, and its 200 a false alarm.
            headers.setdefault("Authorization", f"Bearer {ACME}")
        if "stream" in operation.path and _valid_timeout((case.query or {}).get("timeout", 1)):
            # A stream must end in a test. An invalid timeout is left alone: replacing it would
            # make the request valid, and the server answer 200 to what the fuzzer calls invalid.
            case.query = {**(case.query or {}), "timeout": 0.5}
        response = case.call_and_validate(
            base_url=server.url, headers=headers, checks=CHECKS, timeout=30
        )
        if 400 <= response.status_code < 500:
            check_refusal(response)
            assert fingerprint(server.store) == before, (
                f"a refused {operation.label} changed the store"
            )

    run()
