"""A finished session's spans sent after the fact over OTLP/HTTP to a loopback receiver that
decodes the protobuf, through the library call and through `tether sessions trace`."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tether.cli.main import main
from tether.events import SessionCreated
from tether.store import SQLiteStore
from tether.telemetry.export import ExportFailed, export_session, traces_url

from . import scenario


class Receiver:
    """An OTLP/HTTP collector of one endpoint, keeping every span it is sent."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.paths: list[str] = []
        self.content_types: list[str] = []
        received = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.paths.append(self.path)
                received.content_types.append(self.headers["Content-Type"])
                request = ExportTraceServiceRequest.FromString(body)
                for resource_spans in request.resource_spans:
                    for scope_spans in resource_spans.scope_spans:
                        received.spans.extend(scope_spans.spans)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver()
    thread = threading.Thread(target=made.server.serve_forever, daemon=True)
    thread.start()
    yield made
    made.server.shutdown()
    made.server.server_close()


def attributes(span: Span) -> dict[str, object]:
    out: dict[str, object] = {}
    for kv in span.attributes:
        value = kv.value
        kind = value.WhichOneof("value")
        out[kv.key] = (
            [v.string_value for v in value.array_value.values]
            if kind == "array_value"
            else getattr(value, str(kind))
        )
    return out


async def finished_session(path: Path) -> tuple[str, str]:
    store = SQLiteStore(str(path))
    agent = scenario.agent(store)
    result = await agent.run("go", end_session=True)
    created = (await store.read(result.session_id))[0].payload
    await agent.close()
    assert isinstance(created, SessionCreated)
    return result.session_id, str(created.metadata["trace_id"])


async def test_a_finished_session_is_sent_over_otlp_http(
    receiver: Receiver, tmp_path: Path
) -> None:
    session_id, trace_id = await finished_session(tmp_path / "t.db")
    store = SQLiteStore(str(tmp_path / "t.db"))
    sent = await export_session(store, session_id, receiver.url)
    await store.close()
    assert receiver.paths == ["/v1/traces"]
    assert receiver.content_types == ["application/x-protobuf"]
    spans = list(receiver.spans)
    assert sent == len(spans) == 13  # a turn, 6 chats, a retry, 4 tools, a thread
    assert {s.trace_id.hex() for s in spans} == {trace_id}
    names = sorted(s.name for s in spans)
    assert names.count("chat scripted") == 6 and names.count("execute_tool lookup") == 2
    assert {"invoke_agent", "invoke_agent researcher", "retry scripted"} <= set(names)
    [turn] = [s for s in spans if s.name == "invoke_agent"]
    assert turn.parent_span_id == b""
    ids = {s.span_id for s in spans}
    assert all(s.parent_span_id in ids for s in spans if s is not turn)
    [save] = [s for s in spans if s.name == "execute_tool save"]
    assert attributes(save)["gen_ai.tool.name"] == "save"
    assert attributes(save)["tether.tool.outcome"] == "ok"
    assert "gen_ai.tool.call.result" not in attributes(save)
    chat = next(s for s in spans if s.name == "chat scripted")
    assert chat.kind == Span.SPAN_KIND_CLIENT
    assert attributes(chat)["gen_ai.operation.name"] == "chat"
    assert isinstance(attributes(chat)["gen_ai.usage.input_tokens"], int)
    assert attributes(chat)["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert all(s.end_time_unix_nano >= s.start_time_unix_nano > 0 for s in spans)

    # Sent again, the same spans with the same ids: a collector stores nothing new.
    store = SQLiteStore(str(tmp_path / "t.db"))
    await export_session(store, session_id, receiver.url)
    await store.close()
    first, again = receiver.spans[: len(spans)], receiver.spans[len(spans) :]
    assert [s.SerializeToString() for s in first] == [s.SerializeToString() for s in again]


async def test_tether_sessions_trace_sends_a_session(
    receiver: Receiver, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    session_id, trace_id = await finished_session(tmp_path / "t.db")
    url = f"sqlite:///{tmp_path / 't.db'}"
    argv = ["sessions", "trace", session_id, "--otlp", receiver.url + "/v1/traces"]
    code = await _run_cli([*argv, "--store", url, "--content"])
    assert code == 0
    assert f"13 spans of {session_id} sent" in capsys.readouterr().out
    assert {s.trace_id.hex() for s in receiver.spans} == {trace_id}
    [save] = [s for s in receiver.spans if s.name == "execute_tool save"]
    assert attributes(save)["gen_ai.tool.call.result"] == "saved"  # --content


async def test_a_collector_that_refuses_is_an_error(tmp_path: Path) -> None:
    session_id, _ = await finished_session(tmp_path / "t.db")
    store = SQLiteStore(str(tmp_path / "t.db"))
    with pytest.raises(ExportFailed, match="did not take"):
        await export_session(store, session_id, "http://127.0.0.1:9", seconds=1.0)
    await store.close()


def test_a_collector_address_gets_the_traces_path() -> None:
    assert traces_url("http://c:4318") == "http://c:4318/v1/traces"
    assert traces_url("http://c:4318/") == "http://c:4318/v1/traces"
    assert traces_url("http://c:4318/custom/traces") == "http://c:4318/custom/traces"


async def _run_cli(argv: list[str]) -> int:
    import asyncio

    # The CLI runs its own event loop: in a thread, as a user's shell would run it.
    return await asyncio.to_thread(main, argv)
