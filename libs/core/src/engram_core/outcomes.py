"""What a worker says about one event, and so what happens to its log message."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Outcome(StrEnum):
    APPLIED = "applied"  # done, or nothing left to do: ack
    RETRY = "retry"  # a dependency failed; try again later: nak with backoff
    POISON = "poison"  # can never be applied: dead-letter and term


@dataclass(frozen=True, slots=True)
class Result:
    outcome: Outcome
    reason: str = ""
    store: str = ""  # who refused a POISON event ("vector", "graph"…); "" for the event itself
    # RETRY only: once the log has delivered the event this often, dead-letter it with the
    # reason instead (0: retry without end). For a wait on something that may never come.
    max_deliveries: int = 0


APPLIED = Result(Outcome.APPLIED)
