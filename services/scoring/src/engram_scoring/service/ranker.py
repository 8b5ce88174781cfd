"""The service object: configured defaults plus per-request overrides, then core ``rank``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from engram_core.errors import InvalidArgument
from engram_core.model import utcnow
from engram_core.profiles import DEFAULT, PROFILES, Profile, profile_named
from engram_core.scoring import (
    Candidate,
    Focus,
    Fusion,
    Params,
    Query,
    RecencyBias,
    ScoredCandidate,
    rank,
)


@dataclass(frozen=True, slots=True)
class Limits:
    default_limit: int = 10
    max_limit: int = 1000
    max_candidates: int = 5000


class Ranker:
    def __init__(
        self,
        defaults: Params,
        limits: Limits,
        clock: Callable[[], datetime] = utcnow,
        profile: Profile = PROFILES[DEFAULT],
    ) -> None:
        self.defaults = defaults
        self.limits = limits
        self.profile = profile  # a request's when it names none
        self._clock = clock
        # Per profile, the configured weights with its overrides; a request's go on top.
        self._weights = {
            name: defaults.weights.with_overrides(p.weight_overrides)
            for name, p in PROFILES.items()
        }

    def params(
        self,
        fusion: Fusion | None,
        limit: int,
        weights: Mapping[str, float],
        profile: str = "",
    ) -> Params:
        """The defaults with the request's knobs applied; limit 0 means the default, and
        profile "" the configured one."""
        if limit < 0 or limit > self.limits.max_limit:
            raise InvalidArgument("limit", f"must be in 1..{self.limits.max_limit} (0 = default)")
        base = self._weights[profile_named(profile).name if profile else self.profile.name]
        return replace(
            self.defaults,
            fusion=fusion or self.defaults.fusion,
            limit=limit or self.limits.default_limit,
            weights=base.with_overrides(weights),
        )

    def check_count(self, n: int) -> None:
        if n > self.limits.max_candidates:
            raise InvalidArgument(
                "candidates", f"{n} candidates; at most {self.limits.max_candidates}"
            )

    def rank(
        self,
        candidates: Sequence[Candidate],
        params: Params,
        text: str = "",
        tags: Sequence[str] = (),
        now: datetime | None = None,
        focus: Focus | None = None,
        recency_bias: RecencyBias | None = None,
    ) -> list[ScoredCandidate]:
        self.check_count(len(candidates))
        query = Query(
            now=now or self._clock(),
            text=text,
            tags=tuple(tags),
            focus=focus or Focus(),
            recency_bias=recency_bias,
        )
        return rank(candidates, query, params)
