"""Tools and an approval: a call marked `needs_approval=True` stops the turn
`awaiting_approval`; this script plays the person who decides, then resumes the session.

    python examples/approvals.py
    TETHER_EXAMPLE_MODEL=openai:gpt-4o-mini python examples/approvals.py

The rule here: transfers up to 100 are allowed, larger ones are denied with a reason the
model gets to read. The same decisions can come from another process
(`tether sessions approve ID CALL`) or over HTTP (`POST /v1/sessions/{id}/decisions`).
"""

from __future__ import annotations

import asyncio
import os
import sys

from tether import Agent, tool
from tether.testing import ScriptedModel, call

LIMIT = 100
ledger: list[str] = []


@tool(effect="read")
def balance() -> str:
    """The account's balance."""
    return "balance: 1,250 EUR"


@tool(needs_approval=True)  # effect="write", the default: it moves money
def transfer(to: str, amount: int) -> str:
    """Send money from the account.

    Args:
        to: Who receives it.
        amount: In whole euros.
    """
    ledger.append(f"{amount} EUR to {to}")
    return f"sent {amount} EUR to {to}"


SCRIPT = ScriptedModel(
    [
        [call("balance"), call("transfer", to="Ana", amount=40)],
        [call("transfer", to="Bruno", amount=900)],
        "Paid Ana 40 EUR. The 900 EUR to Bruno was refused (over the limit).",
    ]
)
TASK = "Check the balance, pay Ana 40 EUR for the tickets, then pay Bruno 900 EUR for the flat."


async def main() -> int:
    agent = Agent(
        os.environ.get("TETHER_EXAMPLE_MODEL") or SCRIPT,
        tools=[balance, transfer],
        store="memory:",
    )
    try:
        result = await agent.run(TASK)
        print(f"turn stopped: {result.stop_reason}")
        while result.stop_reason == "awaiting_approval":
            view = await agent.view(result.session_id)
            waiting = [c for c in view.open_calls if c.id in view.pending_approvals]
            for c in waiting:
                amount = c.arguments.get("amount")
                allow = isinstance(amount, int) and amount <= LIMIT
                reason = None if allow else f"transfers over {LIMIT} EUR need a second signature"
                print(f"approval: {c.name}({c.arguments}) -> {'allow' if allow else 'deny'}")
                await agent.decide(result.session_id, c.id, allow, reason)
            result = await agent.resume(result.session_id)
            print(f"resumed, turn stopped: {result.stop_reason}")
    finally:
        await agent.close()
    print(f"ledger: {ledger}")
    print(f"answer: {result.output}")
    print(f"stop reason: {result.stop_reason}")
    return 0 if result.stop_reason == "end_turn" else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
