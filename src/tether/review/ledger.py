"""The review's state as a pure function of the chair's transcript: the configuration (the
chair's system prompt), the artifact (the first user message), then each answer the chair
gave and the results of its calls, in order. The chair decides from it; `review_from_log`
reads a review back with it, so a process that resumes a review decides as the first did.

Owns objection ids, dispositions, rounds, the retry of an unreadable answer and the stop
the rounds reach; it runs nothing and reads no store.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from tether.errors import UsageError
from tether.messages import JSONObject, JSONValue, Message
from tether.review import parse
from tether.review.parse import Disposition, Malformed, Raised

CONFIG_KEY = "tether_review"  # the chair's system prompt is this config, as JSON
LIMIT_STOPS = frozenset({"budget", "turn_limit", "time_limit", "output_limit"})
Phase = Literal["critique", "answer", "done"]
_STOPPED = re.compile(r"^sub-agent \S+ stopped: (\w+)")
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class Config:
    proposer: str
    critics: tuple[str, ...]
    max_rounds: int = 6
    stable_rounds: int = 2

    def __post_init__(self) -> None:
        if self.max_rounds < 1 or self.stable_rounds < 1:
            raise UsageError(
                f"max_rounds and stable_rounds must be 1 or more, not "
                f"{self.max_rounds} and {self.stable_rounds}"
            )

    def system(self) -> str:
        """The chair's system prompt: this config, canonical JSON (so it is in the log)."""
        body = {
            CONFIG_KEY: 1,
            "proposer": self.proposer,
            "critics": list(self.critics),
            "max_rounds": self.max_rounds,
            "stable_rounds": self.stable_rounds,
        }
        return json.dumps(body, sort_keys=True, separators=(",", ":"))

    @staticmethod
    def from_system(system: str | None) -> Config:
        try:
            data = json.loads(system or "")
        except ValueError:
            data = None
        if not isinstance(data, dict) or data.get(CONFIG_KEY) != 1:
            raise UsageError("not a review session: its main agent is not a review's chair")
        try:
            return Config(
                str(data["proposer"]),
                tuple(str(c) for c in data["critics"]),
                int(data["max_rounds"]),
                int(data["stable_rounds"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"a review session whose configuration is unreadable: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Objection:
    """One line of the ledger: who raised it first, in which rounds it was raised, and the
    proposer's last disposition (None: not answered yet)."""

    id: str
    critic: str
    text: str
    first_round: int
    last_round: int
    disposition: Disposition | None = None
    reason: str | None = None

    @property
    def open(self) -> bool:
        return self.disposition in (None, "deferred")

    def to_json(self) -> JSONObject:
        return {
            "id": self.id,
            "critic": self.critic,
            "text": self.text,
            "first_round": self.first_round,
            "last_round": self.last_round,
            "disposition": self.disposition,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class Ask:
    """What the chair asks next: `participants` (the critics, or the proposer) in `round`;
    `attempt` 2 is the one retry, with what was wrong with each first answer."""

    phase: Literal["critique", "answer"]
    round: int
    attempt: int
    participants: tuple[str, ...]
    retry: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (why, answer)


def normalised(text: str) -> str:
    """How two objections' texts are compared: case, spacing and end punctuation aside."""
    return _SPACES.sub(" ", text).strip().rstrip(".!;").casefold()


class Minutes:
    """The review so far. `apply` takes the results of what `ask` asked; `note` is what the
    last `apply` decided (the chair writes it with its next answer, so every objection and
    disposition is in an event of the main thread)."""

    def __init__(self, config: Config, artifact: str) -> None:
        self.config = config
        self.original = artifact
        self.artifact = artifact
        self.ledger: dict[str, Objection] = {}
        self.round = 1
        self.stable = 0  # rounds in a row with no new objection and no changed disposition
        self.ask: Ask | None = Ask("critique", 1, 1, config.critics)
        self.stop: str | None = None
        self.detail: str | None = None
        self.note: JSONObject = {}
        self.answers = 0  # the chair's answers so far: numbers its calls' ids
        self.repeats: dict[str, int] = dict.fromkeys(config.critics, 0)
        self._heard: dict[str, list[Raised]] = {}
        self._raised: list[str] = []  # ids raised this round, in order
        self._new: list[str] = []  # ids first raised this round

    # -- applying results ---------------------------------------------------------------
    def apply(self, results: dict[str, tuple[str, bool]]) -> None:
        """The results of `ask`'s calls, by participant: (content, is_error)."""
        ask = self.ask
        if ask is None:
            return
        self.note = {"round": ask.round}
        failed: dict[str, tuple[str, str]] = {}
        for name in ask.participants:
            content, is_error = results.get(name, ("no result", True))
            if is_error:
                self._participant_stopped(name, content)
                return
            try:
                if ask.phase == "critique":
                    self._heard[name] = parse.objections(content)
                else:
                    self._answered(parse.answer(content, self._raised))
            except Malformed as exc:
                failed[name] = (str(exc), content)
        if failed:
            self._unreadable(ask, failed)
        elif ask.phase == "critique":
            self._merge()

    def _participant_stopped(self, name: str, content: str) -> None:
        """A participant's thread that ended without an answer: a limit stops the review as
        a budget does; any other failure (a provider's error) is an error."""
        match = _STOPPED.match(content)
        how = match.group(1) if match else "error"
        self._finish("budget" if how in LIMIT_STOPS else "error", f"{name}: {content[:500]}")

    def _unreadable(self, ask: Ask, failed: dict[str, tuple[str, str]]) -> None:
        self.note["unreadable"] = {name: why for name, (why, _) in failed.items()}
        if ask.attempt == 1:
            self.ask = replace(ask, attempt=2, participants=tuple(failed), retry=failed)
            return
        name, (why, _) = next(iter(failed.items()))
        self._finish("malformed", f"{name}'s answer could not be used after a retry: {why}")

    def _merge(self) -> None:
        """This round's objections from every critic, in critic order, each with its id."""
        listed: list[JSONValue] = []
        for critic in self.config.critics:
            for raised in self._heard.get(critic, []):
                oid = self._identify(critic, raised)
                if oid in self._raised:
                    continue
                self._raised.append(oid)
                entry = self.ledger[oid]
                self.ledger[oid] = replace(entry, last_round=self.round)
                listed.append(
                    {"id": oid, "critic": critic, "text": entry.text, "new": oid in self._new}
                )
        self.note["objections"] = listed
        if self._raised:
            self.ask = Ask("answer", self.round, 1, (self.config.proposer,))
        else:
            self._close_round(changed=[])

    def _identify(self, critic: str, raised: Raised) -> str:
        """A repeat keeps its id (named, or by the same text); a new objection gets the next
        `CRITIC#N`."""
        if raised.id is not None and raised.id in self.ledger:
            self.repeats[critic] += 1
            return raised.id
        key = normalised(raised.text)
        for oid, entry in self.ledger.items():
            if normalised(entry.text) == key:
                if oid not in self._new:
                    self.repeats[critic] += 1
                return oid
        number = 1 + sum(1 for o in self.ledger.values() if o.critic == critic)
        oid = f"{critic}#{number}"
        self.ledger[oid] = Objection(oid, critic, raised.text, self.round, self.round)
        self._new.append(oid)
        return oid

    def _answered(self, answer: parse.Answer) -> None:
        changed: list[str] = []
        listed: list[JSONValue] = []
        for oid in self._raised:
            kind, reason = answer.dispositions[oid]
            entry = self.ledger[oid]
            if entry.disposition != kind:
                changed.append(oid)
            self.ledger[oid] = replace(entry, disposition=kind, reason=reason)
            listed.append(
                {"id": oid, "disposition": kind, "reason": reason, "changed": oid in changed}
            )
        self.note["dispositions"] = listed
        self.note["revised"] = answer.artifact is not None and answer.artifact != self.artifact
        if answer.artifact is not None:
            self.artifact = answer.artifact
        self._close_round(changed)

    def _close_round(self, changed: list[str]) -> None:
        """A round with no new objection and no changed disposition is stable; enough of
        them in a row converge the review."""
        self.stable = 0 if self._new or changed else self.stable + 1
        self.note["stable_rounds"] = self.stable
        if self.stable >= self.config.stable_rounds:
            self._finish("converged", f"{self.stable} rounds with nothing new")
        elif self.round >= self.config.max_rounds:
            self._finish("max_rounds", f"{self.round} rounds (max_rounds)")
        else:
            self.round += 1
            self.ask = Ask("critique", self.round, 1, self.config.critics)
            self._heard, self._raised, self._new = {}, [], []

    def _finish(self, stop: str, detail: str) -> None:
        self.stop, self.detail, self.ask = stop, detail, None
        self.note["stop"], self.note["detail"] = stop, detail

    # -- what the rounds raised, for tasks and results ----------------------------------
    def raised_now(self) -> list[Objection]:
        """The objections the proposer answers in this round."""
        return [self.ledger[oid] for oid in self._raised]


def replay(system: str | None, messages: Sequence[Message]) -> Minutes:
    """The minutes of the chair's transcript: each answer's calls with their results, in
    order. Results the turn was cut off in (a failed or canceled result followed by a new
    turn's user message: an interrupted review sent on) are not applied, so the chair asks
    again; an answer whose results are not all in yet ends the replay."""
    config = Config.from_system(system)
    if not messages or messages[0].role != "user":
        raise UsageError("a review's transcript starts with the artifact")
    minutes = Minutes(config, messages[0].text)
    for i, asked in enumerate(messages):
        if asked.role != "assistant":
            continue
        minutes.answers += 1
        if not asked.tool_calls:
            continue
        answered = messages[i + 1] if i + 1 < len(messages) else None
        if answered is None or answered.role != "tool":
            break
        reopened = i + 2 < len(messages) and messages[i + 2].role == "user"
        if reopened and any(r.is_error for r in answered.tool_results):
            minutes.note = {"asking_again": "the turn was cut off while these calls ran"}
            continue
        by_call = {r.call_id: r for r in answered.tool_results}
        results: dict[str, tuple[str, bool]] = {}
        for c in asked.tool_calls:
            result = by_call.get(c.id)
            if result is not None:
                results[c.name] = (result.content, result.is_error)
        minutes.apply(results)
    return minutes
