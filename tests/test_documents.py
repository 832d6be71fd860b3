"""`tether.documents`: the JSON and TOML people write, read with bounds: nesting up to 64
levels and no deeper, finite numbers only, UTF-8 only; each problem one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.documents import MAX_NESTING, DocumentError, Kind, parse, read


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_nesting_up_to_the_limit_is_read_and_one_level_more_is_refused() -> None:
    assert parse(nested(MAX_NESTING), "json") is not None
    with pytest.raises(DocumentError, match=f"nests deeper than {MAX_NESTING} levels"):
        parse(nested(MAX_NESTING + 1), "json")
    with pytest.raises(DocumentError, match="nests deeper"):
        parse("[t]\nx = " + nested(100_000), "toml")  # past the parser's own recursion
    # Dotted keys nest without recursing in the parser; the walk still measures them.
    with pytest.raises(DocumentError, match="nests deeper"):
        parse(".".join(["k"] * 100) + " = 1", "toml")


@pytest.mark.parametrize(
    ("text", "kind"),
    [("NaN", "json"), ('{"a": [-Infinity]}', "json"), ("[1e999]", "json"), ("a = nan", "toml"),
     ("a = [-inf]", "toml")],
)  # fmt: skip
def test_numbers_must_be_finite(text: str, kind: Kind) -> None:
    with pytest.raises(DocumentError, match="numbers must be finite"):
        parse(text, kind)


def test_a_file_that_is_not_utf8_or_not_its_kind_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "b.json").write_bytes(b'{"a": "\xff"}')
    with pytest.raises(DocumentError, match=r"not UTF-8 text \(byte 7: 0xff\)"):
        read(tmp_path / "b.json", "json")
    (tmp_path / "c.toml").write_text("[a\n")
    with pytest.raises(DocumentError, match="not valid TOML: ") as caught:
        read(tmp_path / "c.toml", "toml")
    assert "\n" not in str(caught.value)
