"""The model-settings flags of `tether run` and `tether chat`: `--reasoning EFFORT`,
`--temperature`, `--max-output-tokens`, `--no-cache`, and `--setting KEY=VALUE` for the rest
(any `ModelSettings` field; a dotted key reaches inside one, `reasoning.budget_tokens=2048`).

It reads the flags into a `ModelSettings` (over what a resumed session recorded); what the
settings do is `tether.settings`'.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from tether.cli.args import COUNT, number
from tether.cli.common import CliError
from tether.errors import UsageError
from tether.messages import JSONObject, JSONValue

EFFORTS = ("low", "medium", "high")


def add_settings_flags(parser: Any) -> None:
    parser.add_argument(
        "--reasoning", choices=EFFORTS, default=None, metavar="EFFORT",
        help="how hard a reasoning model thinks: low, medium or high",
    )  # fmt: skip
    parser.add_argument(
        "--temperature", type=number(at_least=0, at_most=2), default=None, metavar="T"
    )
    parser.add_argument(
        "--max-output-tokens", type=COUNT, default=None, metavar="N",
        help="cap on each answer's tokens (thinking included)",
    )  # fmt: skip
    parser.add_argument("--no-cache", action="store_true", help="no prompt caching (on by default)")
    parser.add_argument(
        "--setting", action="append", type=setting_pair, default=[], metavar="KEY=VALUE",
        help="any other model setting (repeatable): VALUE is read as JSON where it parses, "
             "else as text; e.g. seed=7, tool_choice=required, reasoning.interleaved=true",
    )  # fmt: skip


def setting_pair(text: str) -> tuple[str, JSONValue]:
    """An argparse `type=`: `KEY=VALUE`, the value as JSON if it parses, else as text."""
    key, equals, raw = text.partition("=")
    key = key.strip()
    if not equals or not key or any(not part for part in key.split(".")):
        raise argparse.ArgumentTypeError(f"must be KEY=VALUE, not {text[:60]!r}")
    try:
        value: JSONValue = json.loads(raw, parse_constant=_no_constant)
    except ValueError:
        value = raw
    return key, value


def _no_constant(name: str) -> None:
    raise ValueError(name)  # NaN and infinities are text, which the setting then refuses


def settings_from(args: argparse.Namespace, recorded: JSONObject | None = None) -> Any:
    """The `ModelSettings` the flags give, over `recorded` (what a resumed session started
    with): None when neither says anything. A bad value is a `CliError` naming its flag."""
    from tether.settings import ModelSettings, merged

    base = None
    if recorded:
        try:
            base = ModelSettings.from_json(recorded)
        except UsageError as exc:
            raise CliError(f"the session's recorded model_settings: {exc}") from exc
    given: dict[str, JSONValue] = {}
    for key, value in getattr(args, "setting", None) or ():
        try:
            _put(given, key, value)
            if "." not in key:  # checked on its own, so the error names this flag
                ModelSettings.from_json({key: value})
        except UsageError as exc:
            raise CliError(f"--setting {key}={json.dumps(value)}: {exc}") from exc
    flags: dict[str, JSONValue] = {
        "temperature": getattr(args, "temperature", None),
        "max_output_tokens": getattr(args, "max_output_tokens", None),
    }
    if getattr(args, "reasoning", None) is not None:
        reasoning = given.get("reasoning")
        given["reasoning"] = {**(reasoning if isinstance(reasoning, dict) else {}),
                              "effort": args.reasoning}  # fmt: skip
    if getattr(args, "no_cache", False):
        flags["cache"] = False
    given.update({k: v for k, v in flags.items() if v is not None})
    try:
        over = ModelSettings.from_json(given) if given else None
    except UsageError as exc:  # a flag against a --setting, e.g. reasoning.budget_tokens
        raise CliError(f"model settings: {exc}") from exc
    return merged(base, over)


def _put(target: dict[str, JSONValue], key: str, value: JSONValue) -> None:
    *path, last = key.split(".")
    for part in path:
        inner = target.get(part)
        if not isinstance(inner, dict):
            inner = {}
            target[part] = inner
        target = inner
    target[last] = value
