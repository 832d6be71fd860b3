"""What the chair asks each participant: the task of a critic's or the proposer's call,
which carries everything the participant sees (a sub-agent sees nothing else).

Pure text from the minutes; the shapes asked for are the ones `parse` reads.
"""

from __future__ import annotations

import json

from tether.messages import JSONValue
from tether.review.ledger import Ask, Minutes

CRITIC_SHAPE = '{"objections": [{"id": "<an id from the ledger, or leave it out>", "text": "<the objection>"}]}'
PROPOSER_SHAPE = (
    '{"dispositions": [{"id": "<objection id>", "disposition": "accepted|rejected|deferred", '
    '"reason": "<why>"}], "artifact": "<the whole revised artifact, or null to keep it>"}'
)
RETRY_SHOWN = 2000  # characters of an unusable answer quoted back to its author


def tasks(minutes: Minutes, ask: Ask) -> list[tuple[str, str]]:
    """(participant, task) for each call of `ask`."""
    if ask.phase == "critique":
        out = [(name, critic_task(minutes, ask, name)) for name in ask.participants]
    else:
        out = [(name, proposer_task(minutes, ask, name)) for name in ask.participants]
    return [(name, task + _retry(ask, name)) for name, task in out]


def _block(tag: str, text: str) -> str:
    return f"<{tag}>\n{text}\n</{tag}>"


def _json(value: JSONValue) -> str:
    return json.dumps(value, ensure_ascii=False, indent=1)


def critic_task(minutes: Minutes, ask: Ask, name: str) -> str:
    ledger: list[JSONValue] = [
        {
            "id": o.id,
            "critic": o.critic,
            "text": o.text,
            "disposition": o.disposition,
            "reason": o.reason,
        }
        for o in minutes.ledger.values()
    ]
    return "\n\n".join(
        [
            f"You are {name}, one of the critics in a review "
            f"(round {ask.round} of at most {minutes.config.max_rounds}).",
            "The artifact under review:\n" + _block("artifact", minutes.artifact),
            "The ledger so far: every objection raised, with the proposer's disposition "
            "(JSON):\n" + _block("ledger", _json(ledger)),
            "State the objections you hold against the artifact as it stands now. To keep one "
            "that is in the ledger (yours or another critic's), give its id; a new objection "
            "has no id. Leave out any that the artifact now meets.",
            f"Answer with JSON only, in this shape:\n{CRITIC_SHAPE}\n"
            "An empty list means you have no objections.",
        ]
    )


def proposer_task(minutes: Minutes, ask: Ask, name: str) -> str:
    asked: list[JSONValue] = [
        {"id": o.id, "critic": o.critic, "text": o.text, "previous": o.disposition}
        for o in minutes.raised_now()
    ]
    return "\n\n".join(
        [
            f"You are {name}, the proposer in a review "
            f"(round {ask.round} of at most {minutes.config.max_rounds}). "
            "The critics object to your artifact.",
            "The artifact:\n" + _block("artifact", minutes.artifact),
            'The objections to answer this round (JSON; "previous" is your last disposition '
            "of it, if any):\n" + _block("objections", _json(asked)),
            'Answer each objection with a disposition: "accepted" (you revise the artifact to '
            'meet it), "rejected" (say why in "reason") or "deferred" (not now). If you '
            "accept any, give the whole revised artifact.",
            f"Answer with JSON only, in this shape:\n{PROPOSER_SHAPE}",
        ]
    )


def _retry(ask: Ask, name: str) -> str:
    if name not in ask.retry:
        return ""
    why, answer = ask.retry[name]
    return (
        f"\n\nYour previous answer could not be used: {why}. It was:\n"
        + _block("previous", answer[:RETRY_SHOWN])
        + "\nAnswer again, with JSON only, in the shape above."
    )
