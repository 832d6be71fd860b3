"""Model settings: how each request is sampled and shaped, per agent and per run.

Owns `ModelSettings` and `Reasoning`, their checks, how a run's settings apply over an
agent's (`merged`), their digest (part of every `request_hash`), and the JSON merge patch
that applies `extra` to a request body. No I/O: each provider codec encodes what its wire
API can honour and refuses the rest with a `UsageError` when the request is built.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Literal, Protocol, TypeVar, cast, get_args

from tether.errors import UsageError
from tether.messages import JSONObject, JSONValue, canonical_json

T = TypeVar("T")


class ToolSpecLike(Protocol):
    @property
    def name(self) -> str: ...


Effort = Literal["low", "medium", "high"]
# Reasoning budgets derived from an effort (Anthropic needs a budget), and efforts derived
# from a budget (OpenAI needs an effort): a budget below `medium`'s is `low`, one below
# `high`'s is `medium`, the rest `high`. Anthropic's floor for a budget is 1,024.
EFFORT_BUDGETS: dict[Effort, int] = {"low": 1024, "medium": 4096, "high": 16384}
# `tool_choice` words; any other string names a tool.
TOOL_CHOICE_WORDS = ("auto", "required", "none")


@dataclass(frozen=True, slots=True)
class Reasoning:
    """How hard a reasoning model thinks: `effort` ("low", "medium", "high"), or
    `budget_tokens` (thinking tokens), or both. Each is derived from the other when only one
    is given (`EFFORT_BUDGETS`): Anthropic is sent the budget, OpenAI the effort."""

    effort: Effort | None = None
    budget_tokens: int | None = None
    # Thinking between tool calls too, not only before the first: Anthropic is asked for it
    # (its interleaved-thinking beta header); OpenAI's reasoning models do it unasked.
    interleaved: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.interleaved, bool):
            raise UsageError(
                f"Reasoning.interleaved must be True or False, not {self.interleaved!r}"
            )
        if self.effort is None and self.budget_tokens is None:
            raise UsageError("Reasoning needs effort ('low', 'medium', 'high') or budget_tokens")
        if self.effort is not None and self.effort not in get_args(Effort):
            raise UsageError(
                f"Reasoning.effort must be 'low', 'medium' or 'high', not {self.effort!r}"
            )
        _check_count("Reasoning.budget_tokens", self.budget_tokens)

    @property
    def effective_effort(self) -> Effort:
        if self.effort is not None:
            return self.effort
        budget = cast(int, self.budget_tokens)
        if budget < EFFORT_BUDGETS["medium"]:
            return "low"
        return "medium" if budget < EFFORT_BUDGETS["high"] else "high"

    @property
    def effective_budget(self) -> int:
        if self.budget_tokens is not None:
            return self.budget_tokens
        return EFFORT_BUDGETS[cast(Effort, self.effort)]

    def to_json(self) -> JSONObject:
        out: JSONObject = {"effort": self.effort, "budget_tokens": self.budget_tokens}
        if self.interleaved:  # sparse: settings without it keep the digest they had
            out["interleaved"] = True
        return out

    @staticmethod
    def from_json(data: object) -> Reasoning:
        """`{"effort": "high"}`, `{"budget_tokens": 4096, "interleaved": true}`, ...;
        unknown keys are refused."""
        if not isinstance(data, Mapping):
            raise UsageError(
                f'reasoning must be an object such as {{"effort": "high"}}, not {data!r}'
            )
        unknown = sorted(set(data) - {"effort", "budget_tokens", "interleaved"})
        if unknown:
            raise UsageError(
                f"unknown reasoning settings: {', '.join(map(str, unknown))} "
                "(known: effort, budget_tokens, interleaved)"
            )
        return Reasoning(
            cast(Effort | None, data.get("effort")),
            cast(int | None, data.get("budget_tokens")),
            cast(bool, data.get("interleaved", False)),
        )


@dataclass(frozen=True, slots=True)
class ModelSettings:
    """`ModelSettings(temperature=0.2, max_output_tokens=2048, tool_choice="required")`.

    Every field is optional (None: the provider's default). `temperature`, `top_p`;
    `max_output_tokens` (the tighter of it and `Limits.max_output_tokens`, which carries a
    tenant's cap, is sent); `stop` (a list of sequences); `seed`; `tool_choice` ("auto",
    "required", "none" or the name of one of the agent's tools); `parallel_tool_calls`;
    `reset_tool_choice` (a forcing `tool_choice`, "required" or a tool's name, holds for
    the turn's first request only and is "auto" once the model has answered, as other
    SDKs do; False keeps it for every request of the turn); `timeout` (seconds: bounds
    each HTTP attempt whole, a stream included); `reasoning` (`Reasoning`); `cache`
    (prompt caching, on by default: Anthropic gets cache breakpoints on the system
    prompt or tools and on the latest message; OpenAI caches on its own);
    `extra` (merged into the request body last, as a JSON merge patch: objects merge
    key by key, a null removes the key, anything else replaces).

    A setting the provider cannot honour is a `UsageError` when the request is built (and
    when an `Agent` is made with a provider model), never dropped in silence."""

    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    stop: list[str] | None = None
    seed: int | None = None
    tool_choice: str | None = None
    parallel_tool_calls: bool | None = None
    timeout: float | None = None
    reasoning: Reasoning | None = None
    cache: bool = True
    extra: Mapping[str, JSONValue] | None = None
    reset_tool_choice: bool | None = None
    _digest: str = field(init=False, repr=False, compare=False, default="")
    _relaxed: ModelSettings | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        _check_number("temperature", self.temperature, 0.0, 2.0)
        _check_number("top_p", self.top_p, 0.0, 1.0)
        _check_count("ModelSettings.max_output_tokens", self.max_output_tokens)
        _check_number("timeout", self.timeout, 0.0, math.inf, open_low=True)
        for name in ("temperature", "top_p", "timeout"):  # 1 and 1.0: one setting, one hash
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, float(value))
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int)
        ):
            raise UsageError(f"ModelSettings.seed must be an integer, not {self.seed!r}")
        object.__setattr__(self, "stop", _stop_list(self.stop))
        if self.tool_choice is not None and (
            not isinstance(self.tool_choice, str) or not self.tool_choice.strip()
        ):
            raise UsageError(
                "ModelSettings.tool_choice must be 'auto', 'required', 'none' or a tool's "
                f"name, not {self.tool_choice!r}"
            )
        for name in ("parallel_tool_calls", "cache", "reset_tool_choice"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise UsageError(f"ModelSettings.{name} must be True or False, not {value!r}")
        if self.reasoning is not None and not isinstance(self.reasoning, Reasoning):
            raise UsageError(
                f"ModelSettings.reasoning must be a tether.Reasoning, not {self.reasoning!r}"
            )
        if self.extra is not None:
            object.__setattr__(self, "extra", _json_object(self.extra, "ModelSettings.extra"))
        digest = hashlib.sha256(canonical_json(self.to_json()).encode()).hexdigest()
        object.__setattr__(self, "_digest", digest[:32])

    def __hash__(self) -> int:  # `stop` and `extra` are a list and a dict: hash the digest
        return hash(self._digest)

    @property
    def digest(self) -> str:
        """A hash of every field, part of each request's `request_hash`."""
        return self._digest

    @property
    def forcing(self) -> bool:
        """`tool_choice` makes the model call a tool ("required", or one tool by name)."""
        return self.tool_choice is not None and self.tool_choice not in ("auto", "none")

    def after_forced_call(self) -> ModelSettings:
        """The settings of a turn's requests after its first answer: a forcing
        `tool_choice` let go (auto) unless `reset_tool_choice` is False. Made once."""
        if not self.forcing or self.reset_tool_choice is False:
            return self
        if self._relaxed is None:
            object.__setattr__(self, "_relaxed", replace(self, tool_choice=None))
        return cast(ModelSettings, self._relaxed)

    @property
    def tool_name(self) -> str | None:
        """The tool `tool_choice` names, when it names one."""
        choice = self.tool_choice
        return None if choice is None or choice in TOOL_CHOICE_WORDS else choice

    def to_json(self) -> JSONObject:
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_output_tokens": self.max_output_tokens,
            "stop": list(self.stop) if self.stop is not None else None,
            "seed": self.seed,
            "tool_choice": self.tool_choice,
            "parallel_tool_calls": self.parallel_tool_calls,
            "timeout": self.timeout,
            "reasoning": self.reasoning.to_json() if self.reasoning else None,
            "cache": self.cache,
            "extra": dict(self.extra) if self.extra is not None else None,
            # sparse: settings without it keep the digest they had
            **(
                {}
                if self.reset_tool_choice is None
                else {"reset_tool_choice": self.reset_tool_choice}
            ),
        }

    def given(self) -> JSONObject:
        """`to_json` without what is left at its default: what a spec or a command line
        would write (`from_json` reads either)."""
        out: JSONObject = {
            k: v for k, v in self.to_json().items() if v is not None and k != "cache"
        }
        if not self.cache:
            out["cache"] = False
        if isinstance(reasoning := out.get("reasoning"), dict):
            out["reasoning"] = {k: v for k, v in reasoning.items() if v is not None}
        return out

    @staticmethod
    def from_json(data: Mapping[str, JSONValue]) -> ModelSettings:
        """The settings `to_json` wrote (as a session's `session.created` metadata keeps
        them); unknown keys are refused."""
        known = {f.name for f in fields(ModelSettings) if f.init}
        unknown = sorted(set(data) - known)
        if unknown:
            raise UsageError(f"unknown model settings: {', '.join(unknown)}")
        values = dict(data)
        reasoning = values.pop("reasoning", None)
        kwargs: dict[str, object] = {k: v for k, v in values.items() if v is not None}
        if reasoning is not None:
            kwargs["reasoning"] = Reasoning.from_json(reasoning)
        return ModelSettings(**kwargs)  # type: ignore[arg-type]  # checked in __post_init__


def merged(agent: ModelSettings | None, run: ModelSettings | None) -> ModelSettings | None:
    """A run's settings over its agent's: each field the run gives (not None) wins; `extra`
    merges key by key (the run's values win); caching stays on only if both leave it on.
    None when the result is the defaults, so it hashes as no settings at all."""
    if run is None or agent is None:
        result = run if agent is None else agent
    else:
        result = ModelSettings(
            temperature=_first(run.temperature, agent.temperature),
            top_p=_first(run.top_p, agent.top_p),
            max_output_tokens=_first(run.max_output_tokens, agent.max_output_tokens),
            stop=_first(run.stop, agent.stop),
            seed=_first(run.seed, agent.seed),
            tool_choice=_first(run.tool_choice, agent.tool_choice),
            parallel_tool_calls=_first(run.parallel_tool_calls, agent.parallel_tool_calls),
            timeout=_first(run.timeout, agent.timeout),
            reasoning=_first(run.reasoning, agent.reasoning),
            cache=agent.cache and run.cache,
            extra=_compose(agent.extra, run.extra),
            reset_tool_choice=_first(run.reset_tool_choice, agent.reset_tool_choice),
        )
    return None if result is None or result == DEFAULT_SETTINGS else result


def inherited(parent: ModelSettings | None, own: ModelSettings | None) -> ModelSettings | None:
    """A sub-agent's settings: its caller's (the run's, as they reach it) under its own,
    which win field by field. The caller's `tool_choice` stays with the caller: it names
    the caller's tools, and a sub-agent has its own."""
    if parent is None or (parent.tool_choice is None and parent.reset_tool_choice is None):
        return merged(parent, own)
    return merged(replace(parent, tool_choice=None, reset_tool_choice=None), own)


def for_summary(settings: ModelSettings | None) -> ModelSettings | None:
    """The run's settings as a summary call of the context policy sends them: no tools are
    offered, so nothing about tools; its output cap is the policy's own."""
    if settings is None:
        return None
    if (settings.tool_choice, settings.parallel_tool_calls, settings.max_output_tokens) == (
        None,
        None,
        None,
    ):
        return settings
    bare = replace(settings, tool_choice=None, parallel_tool_calls=None, max_output_tokens=None)
    return None if bare == DEFAULT_SETTINGS else bare


def check_settings(
    settings: ModelSettings | None, model: object, tools: Sequence[ToolSpecLike]
) -> None:
    """Refuse now what every request would refuse: a `tool_choice` naming no tool offered,
    a setting the provider cannot honour (`CodecModel.check_settings`)."""
    if settings is None:
        return
    check_tool_choice(settings, (t.name for t in tools))
    check = getattr(model, "check_settings", None)
    if callable(check):
        check(settings, tools)


def _first(given: T | None, otherwise: T | None) -> T | None:
    return otherwise if given is None else given


def tighter(first: int | None, second: int | None) -> int | None:
    """The smaller of two optional caps (None: no cap)."""
    if first is None:
        return second
    return first if second is None or first <= second else second


def check_tool_choice(settings: ModelSettings | None, tool_names: Iterable[str]) -> None:
    """Refuse a `tool_choice` that names a tool not offered, or asks for a call with no
    tools at all."""
    if settings is None or settings.tool_choice is None:
        return
    names = set(tool_names)
    wanted = settings.tool_name
    if wanted is not None and wanted not in names:
        offered = ", ".join(sorted(names)) or "none"
        raise UsageError(
            f"tool_choice names the tool {wanted!r}, which is not among the tools offered "
            f"({offered})"
        )
    if settings.tool_choice == "required" and not names:
        raise UsageError("tool_choice 'required' needs at least one tool, and none is offered")


def apply_extra(body: JSONObject, extra: Mapping[str, JSONValue] | None) -> JSONObject:
    """`extra` merged into `body` as a JSON merge patch (RFC 7396): objects merge key by
    key, a null removes the key, any other value (a list too) replaces. `body` is changed
    in place and returned."""
    if extra:
        _patch(body, extra)
    return body


def _patch(target: JSONObject, patch: Mapping[str, JSONValue]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict):
            current = target.get(key)
            if not isinstance(current, dict):
                current = {}
                target[key] = current
            _patch(current, value)
        else:
            target[key] = _copy(value)


def _compose(
    first: Mapping[str, JSONValue] | None, second: Mapping[str, JSONValue] | None
) -> dict[str, JSONValue] | None:
    """Two patches as one: objects merge, the second's values (nulls too) win."""
    if first is None or second is None:
        chosen = second if first is None else first
        return None if chosen is None else dict(chosen)
    out: dict[str, JSONValue] = dict(first)
    for key, value in second.items():
        current = out.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            out[key] = _compose(current, value)
        else:
            out[key] = value
    return out


def _copy(value: JSONValue) -> JSONValue:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _json_object(value: object, where: str) -> dict[str, JSONValue]:
    if not isinstance(value, Mapping):
        raise UsageError(f"{where} must be a mapping of JSON values, not {value!r}")
    return {str(_key(k, where)): _json(v, f"{where}[{k!r}]") for k, v in value.items()}


def _key(key: object, where: str) -> str:
    if not isinstance(key, str):
        raise UsageError(f"{where} keys must be strings, not {key!r}")
    return key


def _json(value: object, where: str) -> JSONValue:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise UsageError(f"{where} must be a finite number, not {value!r}")
        return value
    if isinstance(value, Mapping):
        return _json_object(value, where)
    if isinstance(value, list | tuple):
        return [_json(v, f"{where}[{i}]") for i, v in enumerate(value)]
    raise UsageError(
        f"{where} must be JSON (null, bool, number, string, list, object), not {value!r}"
    )


def _stop_list(stop: object) -> list[str] | None:
    if stop is None:
        return None
    sequences = [stop] if isinstance(stop, str) else stop
    if not isinstance(sequences, list | tuple) or not all(
        isinstance(s, str) and s for s in sequences
    ):
        raise UsageError(f"ModelSettings.stop must be a list of non-empty strings, not {stop!r}")
    return list(sequences)


def _check_number(
    name: str, value: object, low: float, high: float, *, open_low: bool = False
) -> None:
    if value is None:
        return
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if ok and (value > low if open_low else value >= low) and value <= high:  # type: ignore[operator]
        return
    bounds = f"above {low:g}" if open_low else f"from {low:g}"
    upper = "" if math.isinf(high) else f" to {high:g}"
    raise UsageError(f"ModelSettings.{name} must be a number {bounds}{upper}, not {value!r}")


def _check_count(name: str, value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise UsageError(f"{name} must be a positive integer, not {value!r}")


DEFAULT_SETTINGS = ModelSettings()  # below the checks its construction runs
