"""proto <-> domain for AdminService (engram.gateway.v1.admin)."""

from __future__ import annotations

from engram.gateway.v1 import admin_pb2
from engram_core.errors import InvalidArgument
from engram_gateway.service.admin import PASSES, Consolidation, PassRun, PassStatus, RunState
from engram_platform.convert import ts_to_proto

_MODES: dict[int, tuple[str, ...]] = {
    admin_pb2.CONSOLIDATION_MODE_DECAY: ("decay",),
    admin_pb2.CONSOLIDATION_MODE_ASSOCIATE: ("associate",),
    admin_pb2.CONSOLIDATION_MODE_CLUSTER: ("cluster",),
    admin_pb2.CONSOLIDATION_MODE_FORGET: ("forget",),
    admin_pb2.CONSOLIDATION_MODE_ALL: PASSES,
}
_MODE_OF: dict[str, admin_pb2.ConsolidationMode.ValueType] = {
    names[0]: admin_pb2.ConsolidationMode.ValueType(mode)
    for mode, names in _MODES.items()
    if len(names) == 1
}
_STATES = {
    RunState.NEVER: admin_pb2.PASS_STATE_UNSPECIFIED,
    RunState.PENDING: admin_pb2.PASS_STATE_PENDING,
    RunState.RUNNING: admin_pb2.PASS_STATE_RUNNING,
    RunState.SUCCEEDED: admin_pb2.PASS_STATE_SUCCEEDED,
    RunState.FAILED: admin_pb2.PASS_STATE_FAILED,
}


def passes_from_mode(value: int) -> tuple[str, ...]:
    if value == admin_pb2.CONSOLIDATION_MODE_UNSPECIFIED:
        raise InvalidArgument("mode", "required: decay, associate, cluster, forget or all")
    passes = _MODES.get(value)
    if passes is None:
        raise InvalidArgument("mode", f"unknown consolidation mode {value}")
    return passes


def pass_run_to_proto(run: PassRun) -> admin_pb2.PassRun:
    msg = admin_pb2.PassRun(
        mode=_MODE_OF[run.pass_name],
        run_id=run.run_id,
        state=_STATES[run.state],
        dry_run=run.dry_run,
        trigger=run.trigger,
        duration_s=run.duration_s,
        phase=run.phase,
        done=run.done,
        total=run.total,
        changes=[
            admin_pb2.ConsolidationChange(kind=c.kind, count=c.count, sample_ids=list(c.sample))
            for c in run.changes
        ],
        error=run.error,
        resumes=run.resumes,
    )
    if run.started_at is not None:
        msg.started_at.CopyFrom(ts_to_proto(run.started_at))
    if run.finished_at is not None:
        msg.finished_at.CopyFrom(ts_to_proto(run.finished_at))
    return msg


def consolidation_to_proto(out: Consolidation) -> admin_pb2.ConsolidateResponse:
    return admin_pb2.ConsolidateResponse(
        run_id=out.run_id,
        passes=[_MODE_OF[p] for p in out.passes],
        reports=[pass_run_to_proto(r) for r in out.reports],
    )


def status_to_proto(
    tenant: str, statuses: list[PassStatus]
) -> admin_pb2.ConsolidationStatusResponse:
    passes = []
    for s in statuses:
        item = admin_pb2.PassStatus(mode=_MODE_OF[s.pass_name], pending_run_id=s.pending_run_id)
        if s.last_run is not None:
            item.last_run.CopyFrom(pass_run_to_proto(s.last_run))
        if s.last_dry_run is not None:
            item.last_dry_run.CopyFrom(pass_run_to_proto(s.last_dry_run))
        passes.append(item)
    return admin_pb2.ConsolidationStatusResponse(tenant=tenant, passes=passes)
