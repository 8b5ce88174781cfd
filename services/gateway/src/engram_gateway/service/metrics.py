"""The gateway's own instruments (the README's "Metrics" table lists them).

Created on the API's global meter: until the process installs a MeterProvider they record
nothing, and afterwards they bind to it, so nothing here needs wiring. Attribute values
are the small fixed sets named below — never a query, a memory's content or an id; the
tenant only where a setting allows it.
"""

from __future__ import annotations

from opentelemetry import metrics

from engram_core.errors import DeadlineExceeded, Unavailable

_meter = metrics.get_meter("engram.gateway")

# Sizes are counts, not milliseconds: the SDK's default buckets would not fit them.
_SIZE_BUCKETS = (0, 1, 5, 10, 25, 50, 100, 200, 400, 800, 1600)

stage_duration = _meter.create_histogram(
    "engram.recall.stage.duration",
    unit="ms",
    description="Time of one recall step (stage: vector, lexical, graph, relations, ...).",
)
answers = _meter.create_counter(
    "engram.recall.answers",
    unit="{recall}",
    description="Recalls answered (outcome: complete, degraded): the degraded ratio's base.",
)
degraded = _meter.create_counter(
    "engram.recall.degraded",
    unit="{step}",
    description="Recall steps that failed or ran out of time, leaving the answer degraded.",
)
candidates = _meter.create_histogram(
    "engram.recall.candidates",
    unit="{candidate}",
    description="Candidates merged from the retrieval streams before ranking.",
    explicit_bucket_boundaries_advisory=_SIZE_BUCKETS,
)
cache_requests = _meter.create_counter(
    "engram.recall.cache.requests",
    unit="{request}",
    description="Recall cache lookups (result: hit, miss).",
)
escalations = _meter.create_counter(
    "engram.recall.escalations",
    unit="{recall}",
    description="Recalls re-run with a wider pool for a weak best score (outcome: ok, failed).",
)
model_runs = _meter.create_counter(
    "engram.recall.model.runs",
    unit="{call}",
    description="Query-side model calls (model: hyde, decompose, rerank) by outcome.",
)
admission_rejections = _meter.create_counter(
    "engram.admission.rejections",
    unit="{request}",
    description="Requests refused before any work: rate limit, full queue, deadline in queue.",
)
access_dropped = _meter.create_counter(
    "engram.access.dropped",
    unit="{event}",
    description="MemoryAccessed events not published (reason: backlog, error).",
)

subscriptions_open = _meter.create_up_down_counter(
    "engram.subscriptions.open",
    unit="{stream}",
    description="Subscribe streams open on this gateway, each holding a reader on the log.",
)

events_published = _meter.create_counter(
    "engram.events.published",
    unit="{event}",
    description="Events published to the log (event: memory_stored, ...; outcome: ok, "
    "duplicate, timeout, error).",
)

TIMEOUT = "timeout"
UNAVAILABLE = "unavailable"
ERROR = "error"


def failure_reason(exc: BaseException | None) -> str:
    """The ``reason`` of a failed step: ``None`` (no time left) and timeouts are timeout."""
    if exc is None or isinstance(exc, TimeoutError | DeadlineExceeded):
        return TIMEOUT
    if isinstance(exc, Unavailable):
        return UNAVAILABLE
    return ERROR


def rejected(reason: str, tenant: str, tenant_label: bool) -> None:
    """Count an admission refusal; the tenant is a label only when the setting allows it."""
    attrs = {"reason": reason, "tenant": tenant} if tenant_label else {"reason": reason}
    admission_rejections.add(1, attrs)


def stage_took(stage: str, seconds: float) -> None:
    stage_duration.record(seconds * 1000.0, {"stage": stage})


def published(event: str, outcome: str) -> None:
    events_published.add(1, {"event": event, "outcome": outcome})
