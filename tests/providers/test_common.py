"""The shared decoding rules: argument parsing, stop normalisation, synthesized ids."""

from __future__ import annotations

import pytest

from tether.messages import ToolCall
from tether.providers.common import (
    dump_arguments,
    error_text,
    normalise_stop,
    synthesize_call_id,
    tool_call,
)


@pytest.mark.parametrize(
    ("arguments", "expected", "raw"),
    [
        ('{"a": 1}', {"a": 1}, None),
        ({"a": 1}, {"a": 1}, None),
        ("", {}, None),
        (None, {}, None),
        ('{"a": ', {}, '{"a": '),
        ("[1, 2]", {}, "[1, 2]"),
        ('"just a string"', {}, '"just a string"'),
        ([1, 2], {}, "[1, 2]"),
    ],
)
def test_arguments_that_are_not_an_object_keep_their_raw_text(
    arguments: object, expected: dict, raw: str | None
) -> None:  # type: ignore[type-arg]
    call = tool_call("c", "f", arguments)
    assert call.arguments == expected and call.raw_arguments == raw


@pytest.mark.parametrize(
    ("raw", "has_calls", "incomplete", "expected"),
    [
        ("end_turn", False, False, "end_turn"),
        ("stop", True, False, "tool_calls"),
        ("tool_use", False, False, "end_turn"),
        ("length", False, False, "max_tokens"),
        ("max_tokens", True, True, "max_tokens"),
        ("content_filter", False, False, "other"),
        ("pause_turn", False, False, "other"),
        ("refusal", False, False, "other"),
        (None, False, False, "end_turn"),
    ],
)
def test_stop_reasons_normalise(
    raw: str | None, has_calls: bool, incomplete: bool, expected: str
) -> None:
    assert normalise_stop(raw, has_calls, incomplete) == expected


def test_synthesized_ids_depend_on_request_position_and_content() -> None:
    base = synthesize_call_id("seed", 0, "f", {"a": 1})
    assert base == synthesize_call_id("seed", 0, "f", {"a": 1})
    assert (
        len(
            {
                base,
                synthesize_call_id("seed", 1, "f", {"a": 1}),
                synthesize_call_id("other", 0, "f", {"a": 1}),
                synthesize_call_id("seed", 0, "f", {"a": 2}),
            }
        )
        == 4
    )


def test_arguments_are_sent_back_compact_and_unescaped() -> None:
    assert (
        dump_arguments(ToolCall("c", "f", {"city": "Bogotá", "n": 1})) == '{"city":"Bogotá","n":1}'
    )
    assert dump_arguments(ToolCall("c", "f", {}, "{broken")) == "{broken"


def test_error_results_say_so_once() -> None:
    assert error_text("boom", True) == "Error: boom"
    assert error_text("Error: boom", True) == "Error: boom"
    assert error_text("fine", False) == "fine"
