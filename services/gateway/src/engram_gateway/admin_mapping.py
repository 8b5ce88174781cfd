"""proto <-> domain for AdminService (engram.gateway.v1.admin)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, TypeVar

from engram.gateway.v1 import admin_pb2
from engram_core.errors import InvalidArgument
from engram_gateway.service.admin import (
    PASSES,
    Consolidation,
    Maintenance,
    PassRun,
    PassStatus,
    RunState,
)
from engram_gateway.service.dead_letters import DeadLetter, DeadLetterPage, Replay
from engram_gateway.service.tenants import DeletionStatus, TenantDeletion
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
_RunT = TypeVar("_RunT", admin_pb2.PassRun, admin_pb2.StoreRun)
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


def _run_fields(run: PassRun) -> dict[str, Any]:
    """The fields PassRun and StoreRun share (both report one run of a pass)."""
    return {
        "run_id": run.run_id,
        "state": _STATES[run.state],
        "dry_run": run.dry_run,
        "trigger": run.trigger,
        "duration_s": run.duration_s,
        "phase": run.phase,
        "done": run.done,
        "total": run.total,
        "changes": [
            admin_pb2.ConsolidationChange(kind=c.kind, count=c.count, sample_ids=list(c.sample))
            for c in run.changes
        ],
        "error": run.error,
        "resumes": run.resumes,
    }


def _with_times(msg: _RunT, run: PassRun) -> _RunT:
    if run.started_at is not None:
        msg.started_at.CopyFrom(ts_to_proto(run.started_at))
    if run.finished_at is not None:
        msg.finished_at.CopyFrom(ts_to_proto(run.finished_at))
    return msg


def pass_run_to_proto(run: PassRun) -> admin_pb2.PassRun:
    after = _params(run.params).get("after", 0)
    msg = _with_times(
        admin_pb2.PassRun(
            mode=_MODE_OF[run.pass_name],
            incremental_after=after if isinstance(after, int) and after > 0 else 0,
            **_run_fields(run),
        ),
        run,
    )
    if run.unchanged_checked_at is not None:
        msg.unchanged_checked_at.CopyFrom(ts_to_proto(run.unchanged_checked_at))
    return msg


def consolidation_to_proto(out: Consolidation) -> admin_pb2.ConsolidateResponse:
    return admin_pb2.ConsolidateResponse(
        run_id=out.run_id,
        passes=[_MODE_OF[p] for p in out.passes],
        reports=[pass_run_to_proto(r) for r in out.reports],
    )


def status_to_proto(
    tenant: str, statuses: list[PassStatus], syncs: list[PassStatus]
) -> admin_pb2.ConsolidationStatusResponse:
    passes = []
    for s in statuses:
        item = admin_pb2.PassStatus(mode=_MODE_OF[s.pass_name], pending_run_id=s.pending_run_id)
        if s.last_run is not None:
            item.last_run.CopyFrom(pass_run_to_proto(s.last_run))
        if s.last_dry_run is not None:
            item.last_dry_run.CopyFrom(pass_run_to_proto(s.last_dry_run))
        passes.append(item)
    return admin_pb2.ConsolidationStatusResponse(
        tenant=tenant, passes=passes, syncs=[_store_status(s) for s in syncs]
    )


# --- Sync, Rebuild, RebuildStatus ------------------------------------------------------------

_STORES: dict[int, str] = {
    admin_pb2.STORE_VECTOR: "vector",
    admin_pb2.STORE_LEXICAL: "lexical",
    admin_pb2.STORE_GRAPH: "graph",
}
_STORE_OF: dict[str, admin_pb2.Store.ValueType] = {
    name: admin_pb2.Store.ValueType(value) for value, name in _STORES.items()
}
_MODEL = re.compile(r"^[\x21-\x7e]{1,200}$")  # printable ASCII, no spaces


def store_from_proto(value: int, field: str) -> str:
    name = _STORES.get(value)
    if name is None:
        raise InvalidArgument(field, f"vector, lexical or graph; got {value}")
    return name


def stores_from_proto(values: Sequence[int]) -> tuple[str, ...]:
    return tuple(store_from_proto(v, f"stores[{i}]") for i, v in enumerate(values))


def rebuild_from_proto(request: admin_pb2.RebuildRequest) -> tuple[str, str]:
    store = store_from_proto(request.store, "store")
    model = request.embedding_model.strip()
    if model and store != "vector":
        raise InvalidArgument("embedding_model", "only a vector rebuild takes a model")
    if model and not _MODEL.match(model):
        raise InvalidArgument("embedding_model", "1-200 printable characters, no spaces")
    return store, model


def _store_of_pass(name: str) -> admin_pb2.Store.ValueType:
    return _STORE_OF[name.partition("_")[2]]


def store_run_to_proto(run: PassRun) -> admin_pb2.StoreRun:
    params = _params(run.params)
    msg = admin_pb2.StoreRun(
        store=_store_of_pass(run.pass_name),
        generation=str(params.get("generation", "")),
        previous_generation=str(params.get("previous", "")),
        embedding_model=str(params.get("embedding_model", "")),
        **_run_fields(run),
    )
    return _with_times(msg, run)


def _params(text: str) -> dict[str, object]:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def sync_to_proto(out: Consolidation) -> admin_pb2.SyncResponse:
    return admin_pb2.SyncResponse(
        run_id=out.run_id,
        stores=[_store_of_pass(p) for p in out.passes],
        reports=[store_run_to_proto(r) for r in out.reports],
    )


def _store_status(s: PassStatus) -> admin_pb2.StoreStatus:
    item = admin_pb2.StoreStatus(store=_store_of_pass(s.pass_name), pending_run_id=s.pending_run_id)
    if s.last_run is not None:
        item.last_run.CopyFrom(store_run_to_proto(s.last_run))
    if s.last_dry_run is not None:
        item.last_dry_run.CopyFrom(store_run_to_proto(s.last_dry_run))
    return item


def maintenance_to_proto(tenant: str, m: Maintenance) -> admin_pb2.RebuildStatusResponse:
    return admin_pb2.RebuildStatusResponse(
        tenant=tenant,
        rebuilds=[_store_status(s) for s in m.rebuilds],
        syncs=[_store_status(s) for s in m.syncs],
    )


# --- ListDeadLetters, ReplayDeadLetters -------------------------------------------------------


def dead_letter_to_proto(d: DeadLetter) -> admin_pb2.DeadLetter:
    msg = admin_pb2.DeadLetter(
        sequence=d.sequence,
        event=d.event,
        original_subject=d.original_subject,
        original_stream=d.original_stream,
        original_sequence=d.original_sequence,
        reason=d.reason,
        store=d.store,
        deliveries=d.deliveries,
        memory_id=d.memory_id,
    )
    if d.at is not None:
        msg.dead_lettered_at.CopyFrom(ts_to_proto(d.at))
    return msg


def dead_letters_to_proto(tenant: str, page: DeadLetterPage) -> admin_pb2.ListDeadLettersResponse:
    return admin_pb2.ListDeadLettersResponse(
        tenant=tenant,
        dead_letters=[dead_letter_to_proto(d) for d in page.letters],
        next_after=page.next_after,
    )


def replay_to_proto(tenant: str, out: Replay) -> admin_pb2.ReplayDeadLettersResponse:
    return admin_pb2.ReplayDeadLettersResponse(
        tenant=tenant,
        replayed=len(out.replayed),
        failed=len(out.failed),
        replays=[
            admin_pb2.ReplayedDeadLetter(sequence=r.sequence, new_sequence=r.new_sequence)
            for r in out.replayed
        ],
        failures=[admin_pb2.FailedReplay(sequence=s, reason=why) for s, why in out.failed],
        remaining=out.remaining,
    )


def _counts(counts: Sequence[tuple[str, int]]) -> list[admin_pb2.TenantCount]:
    return [admin_pb2.TenantCount(store=s, count=n) for s, n in counts]


def deletion_to_proto(out: TenantDeletion) -> admin_pb2.DeleteTenantResponse:
    return admin_pb2.DeleteTenantResponse(
        tenant=out.tenant, dry_run=out.dry_run, sequence=out.sequence, counts=_counts(out.counts)
    )


def deletion_status_to_proto(out: DeletionStatus) -> admin_pb2.DeleteTenantStatusResponse:
    return admin_pb2.DeleteTenantStatusResponse(
        tenant=out.tenant, sequence=out.sequence, applied=out.applied, counts=_counts(out.counts)
    )
