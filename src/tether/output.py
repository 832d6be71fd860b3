"""Structured output: what `Agent(output_type=...)` asks of the model and how an answer is
checked. Owns `OutputType` (a validator and a JSON schema, from a Python type or from a JSON
schema), the final-answer tool, the correction an invalid answer gets, and reading the
validated output back from a transcript. No I/O: the loop asks it, the codecs encode its
`OutputFormat`, and the fold knows nothing of it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, cast

from pydantic import PlainValidator, RootModel, TypeAdapter, ValidationError

from tether.errors import TetherError, UsageError
from tether.limits import Stop
from tether.messages import JSONObject, JSONValue, Message, Text, ToolCall, canonical_json, user
from tether.providers.base import OutputFormat
from tether.tools.base import Tool

if TYPE_CHECKING:
    from tether.agent import RunResult

FINAL_TOOL = "final_result"
DEFAULT_OUTPUT_RETRIES = 2
# How the output is asked for: the provider's own JSON-schema output, or a tool the model
# calls with the answer as its arguments. None: native for a provider codec, else the tool.
OutputMode = Literal["native", "tool"]
# The user message that answers an invalid final answer starts with this: the loop counts
# the turn's attempts by it, so a resumed session counts them as the first runner did.
CORRECTION = "Your final answer is not valid output:"
_FENCE = re.compile(r"^\s*```[A-Za-z]*\s*\n(.*)\n\s*```\s*$", re.DOTALL)


class OutputMissing(TetherError):
    """A run of an agent with an `output_type` whose turn ended without a valid answer
    (`result.stop_reason` says why: `output_invalid`, a limit, a wait for approval...).
    `result` is the run's result, with `output` None."""

    def __init__(self, result: RunResult[None]) -> None:
        self.result = result
        detail = f": {result.stop_detail}" if result.stop_detail else ""
        super().__init__(
            f"session {result.session_id}: the turn ended {result.stop_reason} without a "
            f"valid output{detail}"
        )


class _Invalid(ValueError):
    pass


@dataclass(frozen=True, slots=True, eq=False)  # one type, one identity: `check` is a closure
class OutputType:
    """A type's validator and JSON schema. `OutputType.of(Invoice)` for a pydantic model,
    dataclass, TypedDict or plain type; `OutputType.from_schema(schema)` for a JSON schema
    (the CLI's `--output-schema`; checked with `jsonschema`, output a plain JSON value)."""

    name: str
    schema: JSONObject
    check: Callable[[object], object]
    # `MODULE:QUALNAME` of the type when it can be imported by that name (None: a schema).
    source: str | None = None
    mode: OutputMode | None = None
    retries: int = DEFAULT_OUTPUT_RETRIES

    @staticmethod
    def of(target: object, *, mode: OutputMode | None = None, retries: int = 2) -> OutputType:
        if isinstance(target, OutputType):
            return target.configured(mode, retries)
        try:
            adapter: TypeAdapter[Any] = TypeAdapter(cast(Any, target))
            schema: JSONObject = adapter.json_schema()
        except Exception as exc:
            raise UsageError(f"output_type {target!r} has no JSON schema: {exc}") from exc

        def check(value: object) -> object:
            try:
                return adapter.validate_python(value)
            except ValidationError as exc:
                raise _Invalid(_describe(exc)) from None

        name = _name(getattr(target, "__name__", "") or "output")
        module, qualname = getattr(target, "__module__", None), getattr(target, "__qualname__", "")
        source = f"{module}:{qualname}" if module and qualname and "<" not in qualname else None
        return OutputType(name, schema, check, source).configured(mode, retries)

    @staticmethod
    def from_schema(schema: Mapping[str, JSONValue], name: str = "output") -> OutputType:
        try:
            import jsonschema  # type: ignore[import-untyped]
        except ImportError as exc:  # pragma: no cover - installed with the dev extras
            raise UsageError(
                "an output JSON schema needs the jsonschema package: pip install 'tether[schema]'"
            ) from exc
        body: JSONObject = json.loads(canonical_json(dict(schema)))
        try:
            validator_class = jsonschema.validators.validator_for(body)
            validator_class.check_schema(body)
        except jsonschema.SchemaError as exc:
            raise UsageError(f"not a valid JSON schema: {exc.message}") from exc
        validator = validator_class(body)

        def check(value: object) -> object:
            errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
            if errors:
                raise _Invalid("; ".join(_schema_problem(e) for e in errors[:5]))
            return value

        title = body.get("title")
        return OutputType(_name(title if isinstance(title, str) else name), body, check)

    def configured(self, mode: OutputMode | None, retries: int) -> OutputType:
        if mode not in (None, "native", "tool"):
            raise UsageError(f"output_mode must be 'native' or 'tool', not {mode!r}")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise UsageError(f"output_retries must be 0 or more, not {retries!r}")
        return OutputType(self.name, self.schema, self.check, self.source, mode, retries)

    @property
    def native(self) -> OutputFormat | None:
        """What the request says of the output: the format, unless the tool carries it."""
        return None if self.mode == "tool" else OutputFormat(self.name, self.schema)

    @property
    def digest(self) -> str:
        """A hash of the schema and mode, part of each request's `request_hash`."""
        body = canonical_json({"schema": self.schema, "mode": self.mode})
        return hashlib.sha256(body.encode()).hexdigest()[:32]

    @property
    def wrapped(self) -> bool:
        """A tool's input must be an object: any other schema is the one argument `result`."""
        return self.schema.get("type") != "object"

    def final_tool(self) -> Tool:
        """The tool a model calls with its final answer; its arguments are checked like any
        call's, so an invalid answer is `tool.finished invalid_input` with the reason."""
        parameters: JSONObject = dict(self.schema)
        if self.wrapped:
            defs = parameters.pop("$defs", None)
            parameters = {"type": "object", "properties": {"result": parameters}}
            parameters["required"] = ["result"]
            if defs is not None:
                parameters["$defs"] = defs
        check, wrapped = self.check, self.wrapped

        def validate(value: object) -> object:
            if wrapped:
                if not isinstance(value, dict) or "result" not in value:
                    raise _Invalid("give the answer as the argument 'result'")
                value = value["result"]
            return check(value)

        return Tool(
            name=FINAL_TOOL,
            description="Give your final answer: call this once, with the answer as its input.",
            parameters=parameters,
            fn=_accept,
            validator=RootModel[Annotated[Any, PlainValidator(validate)]],
            effect="read",
            timeout=None,
            is_async=True,
        )

    def parse(self, text: str) -> object:
        """The validated value of a text answer (JSON, possibly in a code fence); raises
        `ValueError` saying what is wrong."""
        fenced = _FENCE.match(text)
        try:
            value = json.loads(fenced.group(1) if fenced else text)
        except json.JSONDecodeError as exc:
            raise _Invalid(f"the answer is not JSON ({exc.msg} at char {exc.pos})") from None
        return self.check(value)

    def value_of(self, call: ToolCall) -> object:
        arguments: object = call.arguments
        if self.wrapped and isinstance(arguments, dict):
            arguments = arguments.get("result")
        return self.check(arguments)

    def to_json(self) -> JSONObject:
        """What a new session records in `session.created` metadata (`output_type`)."""
        return {"name": self.name, "type": self.source, "schema": self.schema, "mode": self.mode}

    # -- what the loop asks (methods, so the loop imports nothing of this module) ----------

    def invalid_text(self, message: Message) -> str | None:
        """Why a text answer is not valid output (None: it is)."""
        try:
            self.parse(message.text)
        except ValueError as exc:
            return str(exc)
        return None

    def correction(self, problem: str) -> Message:
        """The user message an invalid text answer gets."""
        how = (
            f"call the {FINAL_TOOL} tool with your answer"
            if self.mode == "tool"
            else "answer again with the JSON only"
        )
        return user(f"{CORRECTION} {problem}. Please {how}.")

    def attempts_failed(self, messages: Sequence[Message]) -> int:
        """Invalid final answers since the turn's own user message: corrections sent for
        text answers, and `final_result` calls answered with an error. Read from the
        transcript, so a runner that takes the session over counts as the first did."""
        failed = 0
        errors: set[str] = set()
        for message in reversed(messages):
            if message.role == "user":
                if not message.text.startswith(CORRECTION):
                    break
                failed += 1
            elif message.role == "tool":
                errors.update(r.call_id for r in message.tool_results if r.is_error)
            else:
                calls = message.tool_calls
                failed += sum(1 for c in calls if c.name == FINAL_TOOL and c.id in errors)
        return failed

    def answered(self, messages: Sequence[Message]) -> Stop | None:
        """How the turn ends after its last answer's calls were answered: `end_turn` when a
        `final_result` call was accepted, `output_invalid` when one was refused and no
        attempt is left; None: the model is asked again."""
        if accepted_call(messages) is not None:
            return Stop("end_turn", None)
        last = messages[-1] if messages else None
        if last is None or last.role != "tool" or len(messages) < 2:
            return None
        refused = {r.call_id: r for r in last.tool_results if r.is_error}
        calls = [c for c in messages[-2].tool_calls if c.name == FINAL_TOOL and c.id in refused]
        if not calls:
            return None
        failed = self.attempts_failed(messages)
        if failed <= self.retries:
            return None
        problem = refused[calls[-1].id].content
        return Stop("output_invalid", f"no valid output after {failed} attempts: {problem}")


async def _accept(root: object) -> str:
    return "The final answer is accepted."


def accepted_call(messages: Sequence[Message]) -> ToolCall | None:
    """The `final_result` call of the last answer when its result is not an error: the turn
    has its output."""
    if len(messages) < 2 or messages[-1].role != "tool" or messages[-2].role != "assistant":
        return None
    failed = {r.call_id for r in messages[-1].tool_results if r.is_error}
    for part in messages[-2].parts:
        if isinstance(part, ToolCall) and part.name == FINAL_TOOL and part.id not in failed:
            return part
    return None


def last_output(output: OutputType, messages: Sequence[Message]) -> tuple[bool, object]:
    """The turn's validated output, read from its transcript: an accepted `final_result`
    call, else the last answer's text. (False, None) when there is none."""
    call = accepted_call(messages)
    try:
        if call is not None:
            return True, output.value_of(call)
        last = messages[-1] if messages else None
        if last is not None and last.role == "assistant" and not last.tool_calls:
            text = "".join(p.text for p in last.parts if isinstance(p, Text))
            return True, output.parse(text)
    except ValueError:
        pass
    return False, None


def _describe(exc: ValidationError) -> str:
    problems = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(x) for x in err["loc"]) or "the answer"
        problems.append(f"{where}: {err['msg']}")
    return "; ".join(problems[:5])


def _schema_problem(error: Any) -> str:
    where = ".".join(str(x) for x in error.absolute_path) or "the answer"
    return f"{where}: {error.message}"


def _name(raw: str) -> str:
    """A format name the APIs take: letters, digits, `_` and `-`, at most 64."""
    cleaned = re.sub(r"[^A-Za-z0-9_-]", "_", raw)[:64]
    return cleaned or "output"
