"""Reviews: an artifact revised by a proposer under objections from critics, round by round,
in one session whose main agent is a deterministic chair (`chair.Chair`) and whose
participants run as its sub-agent threads. Crash recovery, cancel, one budget for the tree
and the event log are the session's; the ledger is a replay of the chair's transcript.

    result = await review(text, proposer=writer, critics=[security, style], max_rounds=6)
"""

from tether.review.ledger import Config, Objection
from tether.review.parse import Disposition
from tether.review.run import (
    CriticCount,
    Headline,
    ReviewResult,
    resume_review,
    review,
    review_from_log,
)

__all__ = [
    "Config",
    "CriticCount",
    "Disposition",
    "Headline",
    "Objection",
    "ReviewResult",
    "resume_review",
    "review",
    "review_from_log",
]
