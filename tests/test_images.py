"""Images in user messages: what an `Image` accepts, its canonical JSON and fold round trip,
how `Agent.run` takes one, how context accounting counts one, how it renders, and how a
tool returns some with its result."""

from __future__ import annotations

import base64

import pytest

from tether import Agent, Image, tool
from tether.context.tokens import CharSizer, EncodingSizer
from tether.errors import UsageError
from tether.events import Event, ToolFinished, UserMessage, payload_from_json, payload_to_json
from tether.fold import Transcript, fold
from tether.messages import (
    IMAGE_TOKENS,
    MAX_IMAGE_BYTES,
    Message,
    Text,
    ToolCall,
    ToolResult,
    assistant,
    canonical_json,
    tool_results,
    user,
    user_parts,
)
from tether.render import render_transcript, summarize
from tether.store import MemoryStore, SQLiteStore
from tether.testing import ScriptedModel, call
from tether.tools.run import MAX_RESULT_IMAGES

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
JPEG = b"\xff\xd8\xff\xe0" + b"jfif" * 8
GIF = b"GIF89a" + b"\x00" * 16
URL = "https://example.com/a.png"
WEBP = b"RIFF\x10\x00\x00\x00WEBPVP8 " + b"\x00" * 8


@pytest.mark.parametrize(
    ("data", "kind"),
    [(PNG, "image/png"), (JPEG, "image/jpeg"), (GIF, "image/gif"), (WEBP, "image/webp")],
)
def test_the_media_type_of_bytes_is_read_from_them(data: bytes, kind: str) -> None:
    assert Image(data).media_type == kind
    assert Image(data, media_type=kind).media_type == kind  # type: ignore[arg-type]


def test_an_image_is_bytes_or_a_url_never_both_nor_neither() -> None:
    with pytest.raises(UsageError, match="exactly one"):
        Image()
    with pytest.raises(UsageError, match="exactly one"):
        Image(PNG, url="https://example.com/a.png")


def test_bad_images_are_refused_with_what_is_wrong() -> None:
    with pytest.raises(UsageError, match="not a PNG, JPEG, GIF or WebP"):
        Image(b"%PDF-1.7")
    with pytest.raises(UsageError, match="image/png, not image/jpeg"):
        Image(PNG, media_type="image/jpeg")
    with pytest.raises(UsageError, match="not one of"):
        Image(url="https://example.com/a.bmp", media_type="image/bmp")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="http"):
        Image(url="file:///etc/passwd")
    with pytest.raises(UsageError, match="over the cap"):
        Image(PNG + b"\x00" * MAX_IMAGE_BYTES)


def test_an_image_s_canonical_json_holds_its_bytes_as_base64() -> None:
    image = Image(PNG)
    assert image.to_json() == {
        "type": "image",
        "media_type": "image/png",
        "data": base64.b64encode(PNG).decode(),
    }
    assert Image(url="https://example.com/a.png").to_json() == {
        "type": "image",
        "url": "https://example.com/a.png",
    }
    assert image.data_url == f"data:image/png;base64,{base64.b64encode(PNG).decode()}"


@pytest.mark.parametrize(
    "message",
    [
        user("what is this?", [Image(PNG)]),
        user_parts([Image(url="https://example.com/a.png", media_type="image/png"), "and?"]),
        user_parts(["two:", Image(GIF), Image(WEBP)]),
    ],
)
def test_a_message_with_images_round_trips_in_one_byte_form(message: Message) -> None:
    assert message.canonical() == canonical_json(message.to_json())
    again = Message.from_json(message.to_json())
    assert again == message and again.canonical() == message.canonical()


def test_a_result_s_images_round_trip_and_a_result_without_keeps_its_old_form() -> None:
    shot = tool_results([ToolResult("c1", "shot", images=(Image(PNG), Image(url=URL)))])
    assert shot.canonical() == canonical_json(shot.to_json())
    assert Message.from_json(shot.to_json()) == shot
    plain = tool_results([ToolResult("c1", "done")])
    assert plain.canonical() == (
        '{"parts":[{"call_id":"c1","content":"done","is_error":false,"type":"tool_result"}],'
        '"role":"tool"}'
    )


def test_stored_image_data_that_is_not_base64_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="base64"):
        Message.from_json({"role": "user", "parts": [{"type": "image", "data": "%%%"}]})


def test_a_task_part_that_is_neither_text_nor_image_is_refused() -> None:
    with pytest.raises(UsageError, match="str or an Image"):
        user_parts(["look", 3])  # type: ignore[list-item]


async def test_run_takes_texts_and_images_as_one_user_message_in_order() -> None:
    store = MemoryStore()
    agent = Agent(ScriptedModel(["a red square"]), store=store)
    result = await agent.run(["what is this?", Image(PNG), "be brief"])
    assert result.output == "a red square"
    events = await store.read(result.session_id)
    said = [e.payload for e in events if isinstance(e.payload, UserMessage)]
    assert said[0].message.parts == (Text("what is this?"), Image(PNG), Text("be brief"))
    transcript, _ = fold(events)  # a fresh fold of the log gives the same message back
    assert transcript.messages[0] == said[0].message


def test_an_image_counts_as_a_fixed_estimate_not_its_base64() -> None:
    small = user("x", [Image(PNG)])
    large = user("x", [Image(PNG + b"\x00" * 400_000)])
    sizer = CharSizer(4.0)
    text_only = sizer.message(user("x"))
    assert sizer.message(small) == sizer.message(large)
    assert sizer.message(large) - text_only == IMAGE_TOKENS


def test_a_result_s_images_count_as_the_fixed_estimate_too() -> None:
    sizer = CharSizer(4.0)
    plain = tool_results([ToolResult("c1", "shot")])
    shot = tool_results([ToolResult("c1", "shot", images=(Image(PNG), Image(GIF)))])
    assert sizer.message(shot) - sizer.message(plain) == 2 * IMAGE_TOKENS
    letters = EncodingSizer(_Letters())
    assert letters.message(shot) - letters.message(plain) == 2 * IMAGE_TOKENS


class _Letters:
    def encode_ordinary(self, text: str) -> list[int]:
        return [ord(c) for c in text]


def test_an_encoding_sizer_counts_an_image_as_the_same_estimate() -> None:
    sizer = EncodingSizer(_Letters())
    assert sizer.message(user("ab", [Image(PNG)])) - sizer.message(user("ab")) == IMAGE_TOKENS


def test_renderings_show_an_image_as_a_placeholder_never_its_bytes() -> None:
    message = user("see", [Image(PNG), Image(url="https://example.com/cat.png")])
    shot = tool_results([ToolResult("c1", "shot", images=(Image(GIF),))])
    lines = render_transcript(Transcript(None, (message, shot))).splitlines()
    assert lines == [
        "[user] see",
        f"[user] [image image/png, {len(PNG)} bytes]",
        "[user] [image https://example.com/cat.png]",
        f"[tool] result [c1] shot [image image/gif, {len(GIF)} bytes]",
    ]
    event = Event("ses_1", 1, "ev_1", "2026-12-01T11:36:07.577913Z", UserMessage(message))
    assert summarize(event) == "see [+2 image(s)]"


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_tool_can_return_images_and_they_reach_the_model_and_the_log(
    kind: str, tmp_path: object
) -> None:
    @tool
    def snapshot() -> Image:
        """Take a picture."""
        return Image(PNG)

    @tool
    def album() -> list[object]:
        """Two pictures with a caption."""
        return ["two cats", Image(GIF), Image(url=URL)]

    seen: list[Message] = []

    def look(messages: object) -> str:
        seen.extend(messages)  # type: ignore[call-overload]
        return "I see them"

    model = ScriptedModel([[call("snapshot"), call("album")], look])
    store = MemoryStore() if kind == "memory" else SQLiteStore(f"{tmp_path}/t.db")
    result = await Agent(model, tools=[snapshot, album], store=store).run("take some")
    assert result.output == "I see them"
    shot, pictures = seen[-1].tool_results
    assert (shot.content, shot.images, shot.is_error) == ("", (Image(PNG),), False)
    assert pictures.content == "two cats" and pictures.images == (Image(GIF), Image(url=URL))
    # Stored with the result, and folded back the same in any process.
    events = await store.read(result.session_id)
    transcript, _ = fold(events)
    assert transcript.messages[2].tool_results == (shot, pictures)
    finished = [e for e in events if e.type == "tool.finished"]
    assert all("images" in e.to_json()["data"] for e in finished)


async def test_a_tool_returning_too_many_images_is_answered_by_the_cap() -> None:
    @tool
    def flood() -> list[Image]:
        """Many pictures."""
        return [Image(PNG)] * (MAX_RESULT_IMAGES + 1)

    model = ScriptedModel([call("flood"), "ok"])
    store = MemoryStore()
    result = await Agent(model, tools=[flood], store=store).run("go")
    transcript, _ = fold(await store.read(result.session_id))
    (answer,) = transcript.messages[2].tool_results
    assert answer.is_error and answer.images == ()
    assert f"returned {MAX_RESULT_IMAGES + 1} images; at most {MAX_RESULT_IMAGES}" in answer.content


def test_a_result_without_images_keeps_the_form_it_always_had() -> None:
    plain = ToolFinished("c1", "ok", "2", 1.5)
    assert "images" not in payload_to_json(plain)
    assert payload_from_json("tool.finished", payload_to_json(plain)) == plain
    shot = ToolFinished("c1", "ok", "", 1.5, (Image(PNG),))
    assert payload_from_json("tool.finished", payload_to_json(shot)) == shot


def test_a_call_whose_arguments_look_like_an_image_is_counted_by_its_characters() -> None:
    said = assistant(calls=[ToolCall("c1", "draw", {"type": "image"})])
    assert CharSizer(4.0).message(said) == -(-len(said.canonical()) // 4)
