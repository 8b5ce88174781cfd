"""When a failed call is tried again, and after how long (exponential backoff, jitter)."""

from __future__ import annotations

import random
from dataclasses import dataclass

import grpc

from engram_client.errors import EngramError

# Refused before any work was done, or the server was not reached: safe to try again for a
# call whose repeat changes nothing (a read, or a store under an idempotency key).
RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED})


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5  # in all, the first included; 1 = no retries
    initial_s: float = 0.1
    max_s: float = 5.0
    multiplier: float = 2.0
    jitter: float = 0.5  # the delay is drawn from [1 - jitter, 1] x the backoff

    def delay(
        self, attempt: int, retry_after_s: float | None = None, rng: random.Random | None = None
    ) -> float:
        """Seconds before attempt ``attempt + 1`` (attempt counts from 1), at least the
        server's retry-after-ms."""
        draw = (rng or random).random()
        backoff = min(self.max_s, self.initial_s * self.multiplier ** (attempt - 1))
        jittered = backoff * (1.0 - self.jitter * draw)
        return max(jittered, retry_after_s or 0.0)

    def pause(self, err: EngramError, idempotent: bool, attempt: int, left_s: float) -> float:
        """Seconds to wait before trying ``err``'s call again, or -1 to give up (not
        retryable, out of attempts, or the wait would pass the call's deadline)."""
        if attempt >= self.attempts or not should_retry(err, idempotent):
            return -1.0
        wait = self.delay(attempt, err.retry_after_s)
        return wait if wait < left_s else -1.0


def should_retry(err: EngramError, idempotent: bool) -> bool:
    """A call that may repeat retries UNAVAILABLE and RESOURCE_EXHAUSTED; any other only
    a rate limit (RESOURCE_EXHAUSTED with retry-after-ms: nothing was done). A
    RESOURCE_EXHAUSTED without it (a message too large) never succeeds on a retry."""
    if err.code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return err.retry_after_s is not None
    return idempotent and err.code in RETRYABLE
