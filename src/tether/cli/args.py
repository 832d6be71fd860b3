"""The `tether` command's argument parsing: a usage error is one line (exit 2), and every
number a flag takes is read by `number`, which refuses NaN, infinities and anything out of
its range before the command uses it.

It parses and checks; what the values mean is each subcommand's.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from typing import NoReturn

# The ceilings no flag may pass, whatever it counts: whole numbers stay exact as floats and
# fit every store's 64-bit integers; seconds and dollars stay dates a clock can show.
MAX_WHOLE = 2**53
MAX_NUMBER = 1e9


class Parser(argparse.ArgumentParser):
    """argparse's parser, with a usage error in one line that says where the help is (its
    subcommands are made of this class too)."""

    def error(self, message: str) -> NoReturn:
        print(f"tether: error: {message} (see: {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def number(
    kind: type[int] | type[float] = float,
    *,
    at_least: float | None = None,
    above: float | None = None,
    at_most: float | None = None,
    below: float | None = None,
) -> Callable[[str], float]:
    """An argparse `type=`: the text as a finite `kind` (`int`: a whole number) within the
    bounds given, and never past `MAX_WHOLE` or `MAX_NUMBER`. Anything else is a usage error
    saying what the flag takes and what it was given."""
    ceiling = MAX_WHOLE if kind is int else MAX_NUMBER
    wanted = _described(kind, at_least, above, at_most, below)

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {wanted}, not {text!r}") from None
        if not math.isfinite(value) or not _within(value, at_least, above, at_most, below):
            raise argparse.ArgumentTypeError(f"must be {wanted}, not {text}")
        if abs(value) > ceiling:
            raise argparse.ArgumentTypeError(f"must be at most {ceiling:,.0f}, not {text}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in some messages
    return parse


def _within(
    value: float,
    at_least: float | None,
    above: float | None,
    at_most: float | None,
    below: float | None,
) -> bool:
    return (
        (at_least is None or value >= at_least)
        and (above is None or value > above)
        and (at_most is None or value <= at_most)
        and (below is None or value < below)
    )


def _described(
    kind: type[int] | type[float],
    at_least: float | None,
    above: float | None,
    at_most: float | None,
    below: float | None,
) -> str:
    """E.g. "a whole number from 0 to 65535", "a number above 0", "a number above 0 and
    below 1"."""
    noun = "a whole number" if kind is int else "a number"
    if at_least is not None and at_most is not None:
        return f"{noun} from {at_least:g} to {at_most:g}"
    low = f"{at_least:g} or more" if at_least is not None else None
    low = f"above {above:g}" if above is not None else low
    high = f"at most {at_most:g}" if at_most is not None else None
    high = f"below {below:g}" if below is not None else high
    return " ".join([noun, " and ".join(filter(None, (low, high)))]).strip()


PORT = number(int, at_least=0, at_most=65_535)
COUNT = number(int, at_least=1)  # steps, tokens, runs, rounds, rows: one or more
SECONDS = number(above=0)  # a time limit, a lease, an interval
WAIT = number(at_least=0)  # a wait that may be none
USD = number(above=0)


def metadata_pair(value: str) -> tuple[str, str]:
    """An argparse `type=` for a `KEY=VALUE` filter (`sessions ls --metadata`)."""
    key, equals, text = value.partition("=")
    if not equals or not key:
        raise argparse.ArgumentTypeError(f"must be KEY=VALUE, not {value[:40]!r}")
    return key, text


def nonblank(value: str) -> str:
    """An argparse `type=` for a task or a message: anything but empty or blank (as the
    HTTP API refuses them)."""
    if not value.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return value


def tenant_name(value: str) -> str:
    """An argparse `type=` for a tenant: a name a `tether serve` tokens file could give one."""
    from tether.errors import UsageError
    from tether.runtime.base import check_tenant

    try:
        return check_tenant(value)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
