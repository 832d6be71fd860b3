"""Structured output: `Agent(output_type=...)` returns a validated instance; an invalid answer
goes back to the model as an error and is recorded; the attempts are bounded and counted from
the log, so a resumed session goes on as the first runner would have."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import pytest
from pydantic import BaseModel
from typing_extensions import TypedDict

from tether import Agent
from tether.errors import HandedOver, UsageError
from tether.events import (
    Event,
    ModelResponded,
    SessionCreated,
    ToolFinished,
    TurnEnded,
    UserMessage,
)
from tether.output import CORRECTION, FINAL_TOOL, OutputMissing, OutputType
from tether.providers.base import ModelRequest, ModelResponse
from tether.store import MemoryStore
from tether.testing.scripted import Hang, ScriptedModel, call


class Invoice(BaseModel):
    number: str
    total: int


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Pair(TypedDict):
    left: str
    right: str


class Recording:
    """A scripted model that keeps each request, to see what the loop asked for."""

    def __init__(self, inner: ScriptedModel) -> None:
        self.inner = inner
        self.requests: list[ModelRequest] = []

    @property
    def name(self) -> str:
        return self.inner.name

    async def complete(self, request: ModelRequest) -> ModelResponse:
        # The transcript is the loop's own list, which grows: keep it as it was sent.
        self.requests.append(dataclasses.replace(request, messages=list(request.messages)))
        return await self.inner.complete(request)


async def _events(store: MemoryStore, session_id: str) -> list[object]:
    return [e.payload for e in await store.read(session_id)]


# --- the native path: the answer's text is the JSON -------------------------------------


def test_run_sync_returns_the_validated_instance() -> None:
    model = ScriptedModel(['{"number": "A-1", "total": 120}'])
    agent = Agent(model, store=MemoryStore(), output_type=Invoice, output_mode="native")
    result = agent.run_sync("Bill it.")
    assert result.output == Invoice(number="A-1", total=120)
    assert result.text == '{"number": "A-1", "total": 120}'
    assert result.stop_reason == "end_turn"


async def test_an_invalid_answer_gets_the_error_and_the_next_answer_succeeds() -> None:
    store = MemoryStore()
    model = Recording(ScriptedModel(['{"number": "A-1"}', '{"number": "A-1", "total": 7}']))
    agent = Agent(model, store=store, output_type=Invoice, output_mode="native")
    result = await agent.run("Bill it.")
    assert result.output == Invoice(number="A-1", total=7)
    assert result.steps == 2  # the correction goes on with the turn: both answers count
    second = model.requests[1].messages
    assert second[-1].role == "user" and second[-1].text.startswith(CORRECTION)
    assert "total: Field required" in second[-1].text
    assert model.requests[0].output is not None
    assert model.requests[0].output.schema["required"] == ["number", "total"]
    payloads = await _events(store, result.session_id)
    corrections = [p for p in payloads if isinstance(p, UserMessage)][1:]
    assert [c.message.text.startswith(CORRECTION) for c in corrections] == [True]
    assert [p.stop_reason for p in payloads if isinstance(p, TurnEnded)] == ["end_turn"]


async def test_text_that_is_not_json_is_told_so() -> None:
    model = Recording(ScriptedModel(["about 120 dollars", '```json\n{"x": 1, "y": 2}\n```']))
    agent = Agent(model, store=MemoryStore(), output_type=Point, output_mode="native")
    result = await agent.run("Where?")
    assert result.output == Point(1, 2)
    assert "the answer is not JSON" in model.requests[1].messages[-1].text


async def test_attempts_are_bounded_and_the_turn_ends_output_invalid() -> None:
    store = MemoryStore()
    model = ScriptedModel(["no", "still no", "never"])
    agent = Agent(model, store=store, output_type=Invoice, output_mode="native", output_retries=1)
    with pytest.raises(OutputMissing) as caught:
        await agent.run("Bill it.", end_session=True)
    result = caught.value.result
    assert result.stop_reason == "output_invalid" and result.output is None
    assert "after 2 attempts" in (result.stop_detail or "")
    assert result.state == "failed"  # output_invalid is a failure, not a custom stop
    assert result.steps == 2
    payloads = await _events(store, result.session_id)
    assert sum(isinstance(p, ModelResponded) for p in payloads) == 2


async def test_a_resumed_turn_counts_the_attempts_the_log_holds() -> None:
    """The first runner hands the session over after one invalid answer and its correction;
    the agent that resumes it has one attempt left, not a fresh count."""
    store = MemoryStore()
    corrected = asyncio.Event()

    def watch(event: Event) -> None:
        payload = event.payload
        if isinstance(payload, UserMessage) and payload.message.text.startswith(CORRECTION):
            corrected.set()

    first = Agent(
        ScriptedModel(["no", Hang()]),
        store=store,
        output_type=Invoice,
        output_mode="native",
        output_retries=1,
        on_event=watch,
    )
    running = asyncio.create_task(first.run("Bill it."))
    await corrected.wait()
    session_id = next(iter(first.runs))
    assert await first.hand_over(session_id)
    with pytest.raises(HandedOver):
        await running
    second = Agent(
        ScriptedModel(["unused", "still no", '{"number": "B", "total": 1}']),
        store=store,
        output_type=Invoice,
        output_mode="native",
        output_retries=1,
    )
    with pytest.raises(OutputMissing) as caught:
        await second.resume(session_id)
    assert caught.value.result.stop_reason == "output_invalid"
    assert "after 2 attempts" in (caught.value.result.stop_detail or "")


# --- the tool path: the answer is a final_result call ------------------------------------


async def test_the_final_result_tool_carries_the_answer() -> None:
    model = Recording(ScriptedModel([call(FINAL_TOOL, number="A-2", total=5)]))
    agent = Agent(model, store=MemoryStore(), output_type=Invoice)  # not a codec: the tool
    result = await agent.run("Bill it.")
    assert result.output == Invoice(number="A-2", total=5)
    request = model.requests[0]
    assert request.output is None
    spec = next(t for t in request.tools if t.name == FINAL_TOOL)
    assert spec.parameters["required"] == ["number", "total"]
    # Its only tool: the model is made to call it.
    assert request.settings is not None and request.settings.tool_choice == FINAL_TOOL


async def test_beside_other_tools_the_final_result_call_is_not_forced() -> None:
    def lookup(number: str) -> str:
        """Look an invoice up."""
        return "120"

    model = Recording(
        ScriptedModel([call("lookup", number="A-9"), call(FINAL_TOOL, number="A-9", total=120)])
    )
    agent = Agent(model, tools=[lookup], store=MemoryStore(), output_type=Invoice)
    result = await agent.run("Bill A-9.")
    assert result.output == Invoice(number="A-9", total=120)
    assert [t.name for t in model.requests[0].tools] == ["lookup", FINAL_TOOL]
    assert model.requests[0].settings is None


def test_a_sub_agent_with_a_tool_mode_output_is_refused() -> None:
    agent = Agent(ScriptedModel(["x"]), store=MemoryStore(), name="biller", output_type=Invoice)
    with pytest.raises(UsageError, match="output_mode='native'"):
        agent.as_tool()
    native = Agent(ScriptedModel(["x"]), name="biller", output_type=Invoice, output_mode="native")
    assert native.as_tool().name == "biller"


async def test_an_invalid_final_result_call_is_answered_invalid_input_then_retried() -> None:
    store = MemoryStore()
    model = ScriptedModel(
        [call(FINAL_TOOL, number="A-3", total="lots"), call(FINAL_TOOL, number="A-3", total=9)]
    )
    agent = Agent(model, store=store, output_type=Invoice)
    result = await agent.run("Bill it.")
    assert result.output == Invoice(number="A-3", total=9)
    finished = [p for p in await _events(store, result.session_id) if isinstance(p, ToolFinished)]
    assert [f.outcome for f in finished] == ["invalid_input", "ok"]
    assert "total" in finished[0].content and "integer" in finished[0].content


async def test_refused_final_result_calls_end_the_turn_after_the_retries() -> None:
    model = ScriptedModel([call(FINAL_TOOL, number=1)], repeat_last=True)
    agent = Agent(model, store=MemoryStore(), output_type=Invoice, output_retries=2)
    with pytest.raises(OutputMissing) as caught:
        await agent.run("Bill it.")
    assert caught.value.result.stop_reason == "output_invalid"
    assert caught.value.result.steps == 3


async def test_a_plain_type_is_the_one_argument_result() -> None:
    model = Recording(ScriptedModel([call(FINAL_TOOL, result=[1, 2, 3])]))
    agent = Agent(model, store=MemoryStore(), output_type=list[int])
    result = await agent.run("Count.")
    assert result.output == [1, 2, 3]
    spec = next(t for t in model.requests[0].tools if t.name == FINAL_TOOL)
    assert spec.parameters["required"] == ["result"]


async def test_a_typed_dict_from_json_text_on_the_tool_path() -> None:
    """The tool path still takes a valid JSON text answer (a scripted model's plain str)."""
    agent = Agent(
        ScriptedModel(['{"left": "a", "right": "b"}']), store=MemoryStore(), output_type=Pair
    )
    result = await agent.run("Pair them.")
    assert result.output == {"left": "a", "right": "b"}


# --- what is recorded, and what is refused -------------------------------------------------


async def test_the_session_records_the_output_type() -> None:
    store = MemoryStore()
    agent = Agent(ScriptedModel(['{"x": 1, "y": 2}']), store=store, output_type=Point)
    result = await agent.run("Where?")
    created = next(
        p for p in await _events(store, result.session_id) if isinstance(p, SessionCreated)
    )
    recorded = created.metadata["output_type"]
    assert isinstance(recorded, dict)
    assert recorded["type"] == "tests.test_output:Point" or recorded["type"].endswith(":Point")
    assert recorded["mode"] == "tool" and recorded["name"] == "Point"


async def test_without_an_output_type_output_stays_the_text() -> None:
    agent = Agent(ScriptedModel(['{"x": 1}']), store=MemoryStore())
    result = await agent.run("Hi.")
    assert result.output == '{"x": 1}' and result.text == '{"x": 1}'


def test_output_options_need_an_output_type() -> None:
    with pytest.raises(UsageError, match="need an output_type"):
        Agent(ScriptedModel(["x"]), store=MemoryStore(), output_mode="tool")


def test_a_type_without_a_json_schema_is_refused() -> None:
    with pytest.raises(UsageError, match="no JSON schema"):
        Agent(ScriptedModel(["x"]), store=MemoryStore(), output_type=type(lambda: 0))


def test_a_json_schema_output_checks_with_jsonschema() -> None:
    output = OutputType.from_schema(
        {
            "title": "Answer",
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"],
        }
    )
    assert output.name == "Answer"
    assert output.parse('{"n": 3}') == {"n": 3}
    with pytest.raises(ValueError, match="n: 'x' is not of type 'integer'"):
        output.parse('{"n": "x"}')
    with pytest.raises(UsageError, match="not a valid JSON schema"):
        OutputType.from_schema({"type": 12})


async def test_a_json_schema_output_type_on_an_agent() -> None:
    schema = json.loads('{"type": "object", "properties": {"ok": {"type": "boolean"}}}')
    agent = Agent(
        ScriptedModel(['{"ok": true}']),
        store=MemoryStore(),
        output_type=OutputType.from_schema(schema),
    )
    result = await agent.run("Well?")
    assert result.output == {"ok": True}


# --- tether run --output-schema ------------------------------------------------------------

CLI_MODELS = """
from tether.testing import ScriptedModel

fixed_late = ScriptedModel(['{"total": "x"}', '{"total": 3}'])
never = ScriptedModel(["no"], repeat_last=True)
"""
SCHEMA = {"type": "object", "properties": {"total": {"type": "integer"}}, "required": ["total"]}


@pytest.fixture
def cli_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "out_models.py").write_text(CLI_MODELS)
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TETHER_STORE", raising=False)
    return tmp_path


def _cli(*args: str) -> int:
    from tether.cli.main import main

    return main(["run", "Total?", "--store", "sqlite:///out.db", *args])


def test_cli_prints_the_validated_output_as_json(
    cli_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _cli(
        "--model", "python:out_models:fixed_late", "--output-schema", "schema.json", "--json"
    )
    document = json.loads(capsys.readouterr().out)
    assert code == 0 and document["output"] == {"total": 3}
    assert document["stop_reason"] == "end_turn"


def test_cli_output_invalid_exits_1(cli_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = _cli("--model", "python:out_models:never", "--output-schema", "schema.json", "--json")
    document = json.loads(capsys.readouterr().out)
    assert code == 1 and document["stop_reason"] == "output_invalid"
    assert document["output"] is None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "Expecting property name"),
        ("[1]", "a JSON schema is an object"),
        ('{"type": 5}', "not a valid JSON schema"),
    ],
)
def test_cli_refuses_a_bad_schema_file_and_stores_nothing(
    cli_dir: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    (cli_dir / "bad.json").write_text(content)
    code = _cli("--model", "python:out_models:never", "--output-schema", "bad.json")
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (cli_dir / "out.db").exists()


def test_cli_refuses_a_missing_schema_file(
    cli_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _cli("--model", "python:out_models:never", "--output-schema", "nope.json") == 2
    assert "--output-schema nope.json" in capsys.readouterr().err
    assert not (cli_dir / "out.db").exists()


def test_cli_resume_checks_the_answer_against_the_recorded_schema(
    cli_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tether.cli.main import main

    # A module of its own: `out_models` may be imported already, without this model.
    (cli_dir / "resume_models.py").write_text(
        "from tether.testing import ScriptedModel, call\n"
        "asks_first = ScriptedModel([call('guarded', action='x'), '{\"total\": 3}'])\n"
    )
    code = _cli(
        "--model", "python:resume_models:asks_first", "--tools",
        "tether.testing.runtime_fixtures:tools", "--output-schema", "schema.json", "--json",
    )  # fmt: skip
    assert code == 4  # waiting for the approval of `guarded`
    session_id = json.loads(capsys.readouterr().out)["session_id"]
    (cli_dir / "schema.json").unlink()  # the file is gone: the session's record is what counts
    store = ["--store", "sqlite:///out.db"]
    assert main(["sessions", "approve", session_id, "call_0_0", *store]) == 0
    capsys.readouterr()
    assert main(["sessions", "resume", session_id, "--json", *store]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["output"] == {"total": 3}  # validated: a JSON value, not the answer's text
