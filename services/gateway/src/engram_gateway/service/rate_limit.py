"""Per-tenant rate limits: requests, checked once per RPC after the tenant is known, and
memories written, checked once per write RPC with the number of memories it stores (a batch
of 50 costs 50: what a write costs the ingest workers and stores is per memory, not per call).

Counters live in the RateLimiter port: Redis when the gateway's cache backend is redis (so
the limit holds across replicas), else in-process (each replica counts its own). A limiter
that cannot reach its store allows: losing the limit briefly beats refusing everyone.
"""

from __future__ import annotations

from dataclasses import dataclass

from engram_core.errors import ResourceExhausted
from engram_core.ports import RateLimiter
from engram_gateway.service import metrics

KEY_PREFIX = "gateway:rps:"
WRITE_KEY_PREFIX = "gateway:wps:"


@dataclass(frozen=True, slots=True)
class RateLimitConfig:
    requests_per_s: float = 0.0  # 0 = no limit
    window_s: float = 1.0  # counted in fixed windows this long: a burst may use one whole
    tenant_label: bool = False  # refusals counted per tenant (a label per tenant: opt in)
    key_prefix: str = KEY_PREFIX
    counted: str = "requests"  # what the limit counts, for the refusal's message

    @property
    def per_window(self) -> int:
        return max(1, round(self.requests_per_s * self.window_s))


class TenantRateLimit:
    def __init__(self, limiter: RateLimiter | None, config: RateLimitConfig) -> None:
        self._limiter = limiter if config.requests_per_s > 0 else None
        self._config = config

    @classmethod
    def off(cls) -> TenantRateLimit:
        return cls(None, RateLimitConfig())

    @property
    def enabled(self) -> bool:
        return self._limiter is not None

    async def admit(self, tenant: str, cost: int = 1) -> None:
        """Count `cost` of `tenant`; RESOURCE_EXHAUSTED when it is over its limit. A cost
        above a whole window's allowance counts as that allowance, so it can still pass."""
        if self._limiter is None:
            return
        cfg = self._config
        decision = await self._limiter.hit(
            cfg.key_prefix + tenant, cfg.per_window, cfg.window_s, min(cost, cfg.per_window)
        )
        if not decision.allowed:
            metrics.rejected("rate_limit", tenant, cfg.tenant_label)
            raise ResourceExhausted(
                f"tenant {tenant!r} is over its rate limit of {cfg.per_window} {cfg.counted} per "
                f"{cfg.window_s:g}s; retry after {decision.retry_after_s:.3f}s",
                retry_after_s=decision.retry_after_s,
            )
