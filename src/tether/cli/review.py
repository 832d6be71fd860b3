"""`tether review FILE --proposer MODEL --critic MODEL [--critic MODEL ...]`: the file
reviewed (`tether.review`), its ledger printed and the revised artifact written to `--out`
(by default FILE.reviewed). The exit code says how the review stopped (`EXIT_CODES`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.cli.args import COUNT, SECONDS, USD
from tether.cli.common import (
    EXIT_AWAITING_APPROVAL,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_LIMIT,
    CliError,
    existing_store,
    store_from,
)
from tether.errors import TetherError
from tether.events import Event
from tether.limits import Limits

if TYPE_CHECKING:
    from tether.agent import Agent
    from tether.review import ReviewResult

DEFAULT_ROUNDS, DEFAULT_STABLE = 6, 2
EXIT_CODES = {
    "converged": 0,
    "max_rounds": EXIT_LIMIT,
    "budget": EXIT_LIMIT,
    "malformed": EXIT_ERROR,
    "error": EXIT_ERROR,
    "unfinished": EXIT_ERROR,
    "awaiting_approval": EXIT_AWAITING_APPROVAL,
    "interrupted": EXIT_INTERRUPTED,
}
CRITIC_SYSTEM = (
    "You are a critic in a review. Object only to what matters, keep an objection you still "
    "hold by its id, and answer with JSON only, in the shape the task asks for."
)
PROPOSER_SYSTEM = (
    "You are the author of an artifact under review. Answer every objection honestly, revise "
    "the artifact where an objection is right, and answer with JSON only, in the shape the "
    "task asks for."
)


def add_review_command(sub: Any, store_help: str) -> None:
    p = sub.add_parser(
        "review", help="review a file: critics object, a proposer answers and revises"
    )
    p.add_argument(
        "file",
        nargs="?",
        default=None,
        help="the artifact to review (UTF-8 text); with --resume, only where the revision "
        "goes (FILE.reviewed)",
    )
    p.add_argument(
        "--resume",
        default=None,
        metavar="ID",
        help="go on with review ID (stopped by a limit, interrupted, or left open by a crash) "
        "with the same --proposer and --critic; a limit given replaces the recorded one",
    )
    p.add_argument("--proposer", required=True, metavar="MODEL", help="as `tether run --model`")
    p.add_argument(
        "--critic",
        action="append",
        required=True,
        metavar="MODEL",
        help="a critic's model (repeat for more critics: critic1, critic2, ...)",
    )
    p.add_argument("--max-rounds", type=COUNT, default=None, metavar="N", help="(6)")
    p.add_argument("--stable-rounds", type=COUNT, default=None, metavar="N", help="(2)")
    p.add_argument("--max-steps", type=COUNT, default=None, metavar="N", help="model calls in all")
    p.add_argument("--max-tokens", type=COUNT, default=None, metavar="N", help="token budget")
    p.add_argument("--max-cost", type=USD, default=None, metavar="USD", help="cost budget")
    p.add_argument("--max-seconds", type=SECONDS, default=None, metavar="S", help="wall time")
    p.add_argument("--out", default=None, metavar="PATH", help="default: FILE.reviewed")
    p.add_argument("--store", default=None, help=store_help)
    p.add_argument("--json", action="store_true")


def _out(args: argparse.Namespace, name: str) -> Path:
    out = Path(args.out) if args.out else Path(f"{name}.reviewed")
    if not out.parent.is_dir():
        raise CliError(f"--out {out}: no directory {out.parent}")
    return out


def _checked(args: argparse.Namespace) -> tuple[str, Path, Limits]:
    """The artifact, where the revision goes, and the limits: bad input as a `CliError`."""
    if args.file is None:
        raise CliError("tether review needs a FILE to review (or --resume ID)")
    try:
        text = Path(args.file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"{args.file}: cannot read it: {exc}") from exc
    if not text.strip():
        raise CliError(f"{args.file}: there is nothing to review: the file is empty")
    out = _out(args, args.file)
    limits = Limits(
        max_steps=args.max_steps,
        max_tokens=args.max_tokens,
        max_cost_usd=args.max_cost,
        max_seconds=args.max_seconds,
    )
    return text, out, limits


def _participant(model: str, flag: str, name: str, system: str) -> Agent:
    from tether.agent import Agent, resolve_model

    try:
        return Agent(resolve_model(model), name=name, system=system)
    except TetherError as exc:
        raise CliError(f"{flag} {model}: {exc}") from exc


LIMIT_FLAGS = {
    "max_steps": "max_steps",
    "max_tokens": "max_tokens",
    "max_cost": "max_cost_usd",
    "max_seconds": "max_seconds",
}


async def cmd_review(args: argparse.Namespace) -> int:
    from tether.review import review, review_from_log

    # Everything the user named is checked before the store is touched.
    if args.resume is not None:
        return await cmd_resume(args)
    text, out, limits = _checked(args)
    proposer, critics = _participants(args)
    store = store_from(args.store)
    session: list[str] = []

    def on_event(event: Event) -> None:
        if not session:
            session.append(event.session_id)
            args.interrupts.session_id = event.session_id

    try:
        result = await review(
            text,
            proposer=proposer,
            critics=critics,
            max_rounds=args.max_rounds or DEFAULT_ROUNDS,
            stable_rounds=args.stable_rounds or DEFAULT_STABLE,
            limits=limits,
            store=store,
            on_event=on_event,
        )
    except asyncio.CancelledError:  # Ctrl-C: the turn closed `interrupted`; say where it got
        if session:
            _report(await review_from_log(store, session[0]), out, args)
        await store.close()
        raise
    await store.close()
    _report(result, out, args)
    return EXIT_CODES.get(result.stop_reason, EXIT_ERROR)


def _participants(args: argparse.Namespace) -> tuple[Agent, list[Agent]]:
    proposer = _participant(args.proposer, "--proposer", "proposer", PROPOSER_SYSTEM)
    critics = [
        _participant(model, "--critic", f"critic{i}", CRITIC_SYSTEM)
        for i, model in enumerate(args.critic, 1)
    ]
    return proposer, critics


async def cmd_resume(args: argparse.Namespace) -> int:
    """`tether review --resume ID`: the review continued where it stopped, the limits given
    replacing those it recorded (`resume_review`), its ledger and revision reported."""
    from tether.review import resume_review, review_from_log

    if args.max_rounds is not None or args.stable_rounds is not None:
        raise CliError("--max-rounds and --stable-rounds are the review's own: --resume keeps them")
    out = _out(args, args.file or args.resume)
    changes = {
        limit: getattr(args, flag)
        for flag, limit in LIMIT_FLAGS.items()
        if getattr(args, flag) is not None
    }
    proposer, critics = _participants(args)
    store = existing_store(args.store)
    args.interrupts.session_id = args.resume
    try:
        result = await resume_review(
            args.resume, proposer=proposer, critics=critics, store=store, limits=changes
        )
    except asyncio.CancelledError:
        with contextlib.suppress(TetherError):
            _report(await review_from_log(store, args.resume), out, args)
        await store.close()
        raise
    except TetherError as exc:
        await store.close()
        raise CliError(str(exc)) from exc
    await store.close()
    _report(result, out, args)
    return EXIT_CODES.get(result.stop_reason, EXIT_ERROR)


def _report(result: ReviewResult, out: Path, args: argparse.Namespace) -> None:
    out.write_text(result.artifact, encoding="utf-8")
    if args.json:
        print(json.dumps({**result.to_json(), "out": str(out)}, ensure_ascii=False))
        return
    print(render(result))
    print(f"wrote {out}")
    sys.stdout.flush()


def render(result: ReviewResult) -> str:
    """The ledger: one line per objection (its last disposition and reason), then each
    critic's counts, after a headline of how the review stopped."""
    cost = "unknown" if result.cost_usd is None else f"${result.cost_usd:.6f}"
    detail = f" ({result.detail})" if result.detail else ""
    lines = [
        f"review {result.session_id} · stop: {result.stop_reason}{detail} · "
        f"{result.rounds} rounds · {result.headline} · cost {cost}"
    ]
    width = max((len(o.id) for o in result.ledger), default=0)
    for o in result.ledger:
        lines.append(f"  {o.id:<{width}}  {o.disposition or 'open':<9} {o.text}")
        if o.reason:
            lines.append(f"  {'':<{width}}  {'':<9} reason: {o.reason}")
    if not result.ledger:
        lines.append("  no objections")
    for name, c in result.critics.items():
        lines.append(
            f"{name}: {c.raised} raised, {c.repeated} repeated · "
            f"{c.accepted} accepted, {c.rejected} rejected, {c.open} open"
        )
    return "\n".join(lines)
