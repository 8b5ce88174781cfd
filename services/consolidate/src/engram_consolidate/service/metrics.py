"""Consolidation's own instruments (the README's "Metrics" table); the consumers' batches,
settlements and lag are the pull worker's (``engram_platform.worker_metrics``).

On the API's global meter: no-ops until the process installs a MeterProvider. Attribute
values are pass names, the kinds of change a pass reports and the fixed reasons below.
"""

from __future__ import annotations

from opentelemetry import metrics

from engram_consolidate.service.records import Change

_meter = metrics.get_meter("engram.consolidate")

pass_duration = _meter.create_histogram(
    "engram.consolidate.pass.duration",
    unit="ms",
    description="Time of one pass run on this replica, to its end (outcome: succeeded, failed).",
)
changes = _meter.create_counter(
    "engram.consolidate.changes",
    unit="{change}",
    description="Changes a finished pass run made, by pass and kind (dry runs not counted).",
)
leases_held = _meter.create_up_down_counter(
    "engram.consolidate.leases.held",
    unit="{lease}",
    description="Leases this replica holds (lease: a pass name, one per tenant it runs; "
    "or state_keeper).",
)
skipped = _meter.create_counter(
    "engram.consolidate.runs.skipped",
    unit="{run}",
    description="Runs due here that did not run, by pass (reason: lease_busy, unchanged, not_due).",
)

STATE_KEEPER = "state_keeper"


def finished(pass_name: str, outcome: str, took_s: float, made: tuple[Change, ...]) -> None:
    """A run ended here after ``took_s``, having made ``made`` (empty for a dry run)."""
    pass_duration.record(took_s * 1000.0, {"pass": pass_name, "outcome": outcome})
    for change in made:
        if change.count:
            changes.add(change.count, {"pass": pass_name, "kind": change.kind})
