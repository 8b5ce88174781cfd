"""AdminService in-process (a fake ConsolidationControl behind it) and its NATS adapter
against a real nats-server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import pytest
from nats.js.api import RetentionPolicy, StreamConfig

from engram.events.v1 import events_pb2
from engram.gateway.v1 import admin_pb2, admin_pb2_grpc, gateway_pb2, gateway_pb2_grpc
from engram_core.errors import Unavailable
from engram_gateway import server
from engram_gateway.adapters.consolidation import NatsConsolidation
from engram_gateway.auth import Authenticator
from engram_gateway.bootstrap import build_admin
from engram_gateway.service.admin import PASSES, Change, PassRun, PassStatus, RunState
from engram_platform import jetstream
from engram_platform.convert import ts_from_proto, ts_to_proto
from engram_platform.errors import FIELD_KEY
from engram_platform.settings import NatsSettings
from engram_testing.nats_server import NatsServer, start_nats

if TYPE_CHECKING:
    from conftest import Harness

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
TOKENS = "admin=acme:admin;rw=acme:read+write;root=*:admin"
ADMIN = (("authorization", "Bearer admin"),)
RW = (("authorization", "Bearer rw"),)
ROOT = (("authorization", "Bearer root"),)


@dataclass
class FakeControl:
    """Records requests; answers dry runs after ``dry_delay_s`` (None: never)."""

    requests: list[tuple[str, str, tuple[str, ...], bool]] = field(default_factory=list)
    statuses: dict[str, list[PassStatus]] = field(default_factory=dict)
    dry_delay_s: float | None = 0.1
    fail: Exception | None = None
    params: list[str] = field(default_factory=list)

    async def request(
        self,
        tenant: str,
        run_id: str,
        passes: Sequence[str],
        dry_run: bool,
        at: datetime,
        params: str = "",
    ) -> None:
        if self.fail is not None:
            raise self.fail
        self.requests.append((tenant, run_id, tuple(passes), dry_run))
        self.params.append(params)
        if dry_run and self.dry_delay_s is not None:
            asyncio.get_running_loop().call_later(
                self.dry_delay_s, self._finish_dry, tenant, run_id, tuple(passes)
            )

    def _finish_dry(self, tenant: str, run_id: str, passes: tuple[str, ...]) -> None:
        current = {s.pass_name: s for s in self.statuses.get(tenant, [])}
        for p in passes:
            report = PassRun(
                p,
                run_id,
                RunState.SUCCEEDED,
                dry_run=True,
                started_at=NOW,
                finished_at=NOW + timedelta(seconds=2),
                duration_s=2.0,
                changes=(Change("relevance", 3, ("a", "b", "c")),),
            )
            current[p] = replace(current.get(p, PassStatus(p)), last_dry_run=report)
        self.statuses[tenant] = [current[p] for p in current]

    async def status(self, tenant: str, passes: Sequence[str] = PASSES) -> list[PassStatus]:
        if self.fail is not None:
            raise self.fail
        held = {s.pass_name: s for s in self.statuses.get(tenant, [])}
        return [held.get(p, PassStatus(p)) for p in passes]


@dataclass
class Admin:
    stub: admin_pb2_grpc.AdminServiceStub
    memory: gateway_pb2_grpc.MemoryServiceStub
    control: FakeControl


@pytest.fixture
async def admin(new_harness: Callable[..., Harness]) -> AsyncIterator[Admin]:
    harness = new_harness(tokens=TOKENS, dry_run_poll_ms=20.0)
    control = FakeControl()
    ids = iter(f"run-{n}" for n in range(1, 100))
    gateway = replace(
        harness.gateway,
        admin=build_admin(
            harness.settings, control, lambda: NOW + timedelta(seconds=5), ids.__next__
        ),
    )
    auth = Authenticator.from_sources(TOKENS)
    running = await server.start(harness.settings, gateway, auth)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{running.port}")
    try:
        yield Admin(
            admin_pb2_grpc.AdminServiceStub(channel),
            gateway_pb2_grpc.MemoryServiceStub(channel),
            control,
        )
    finally:
        await channel.close()
        await running.stop(None)


def field_of(err: grpc.aio.AioRpcError) -> str:
    for key, value in err.trailing_metadata() or ():
        if key == FIELD_KEY:
            return str(value)
    return ""


async def refused(call: Any, code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    assert err.value.code() == code, err.value.details()
    return err.value


DECAY = admin_pb2.ConsolidateRequest(mode=admin_pb2.CONSOLIDATION_MODE_DECAY)


async def test_consolidate_publishes_a_request_and_returns_its_run_id(admin: Admin) -> None:
    reply = await admin.stub.Consolidate(DECAY, metadata=ADMIN)
    assert reply.run_id == "run-1"
    assert list(reply.passes) == [admin_pb2.CONSOLIDATION_MODE_DECAY]
    assert not reply.reports
    assert admin.control.requests == [("acme", "run-1", ("decay",), False)]

    everything = admin_pb2.ConsolidateRequest(mode=admin_pb2.CONSOLIDATION_MODE_ALL)
    await admin.stub.Consolidate(everything, metadata=ADMIN)
    assert admin.control.requests[-1][2] == ("decay", "associate", "cluster", "forget")


async def test_admin_scope_is_required(admin: Admin) -> None:
    await refused(admin.stub.Consolidate(DECAY, metadata=RW), grpc.StatusCode.PERMISSION_DENIED)
    await refused(
        admin.stub.ConsolidationStatus(admin_pb2.ConsolidationStatusRequest(), metadata=RW),
        grpc.StatusCode.PERMISSION_DENIED,
    )
    await refused(admin.stub.Consolidate(DECAY), grpc.StatusCode.UNAUTHENTICATED)
    assert not admin.control.requests


async def test_an_unknown_or_missing_mode_is_invalid(admin: Admin) -> None:
    for mode in (0, 99):
        err = await refused(
            admin.stub.Consolidate(admin_pb2.ConsolidateRequest(mode=mode), metadata=ADMIN),  # type: ignore[arg-type]
            grpc.StatusCode.INVALID_ARGUMENT,
        )
        assert field_of(err) == "mode"
    assert not admin.control.requests


async def test_the_tenant_is_the_tokens_unless_it_is_for_every_tenant(admin: Admin) -> None:
    own = replace_tenant(DECAY, "acme")
    await admin.stub.Consolidate(own, metadata=ADMIN)
    await refused(
        admin.stub.Consolidate(replace_tenant(DECAY, "globex"), metadata=ADMIN),
        grpc.StatusCode.PERMISSION_DENIED,
    )
    err = await refused(
        admin.stub.Consolidate(DECAY, metadata=ROOT), grpc.StatusCode.INVALID_ARGUMENT
    )
    assert field_of(err) == "tenant"
    await refused(
        admin.stub.Consolidate(replace_tenant(DECAY, "bad.tenant"), metadata=ROOT),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    await admin.stub.Consolidate(replace_tenant(DECAY, "globex"), metadata=ROOT)
    assert [r[0] for r in admin.control.requests] == ["acme", "globex"]
    # A token for every tenant is for AdminService (and Stats, naming the tenant) only.
    await refused(
        admin.memory.Get(gateway_pb2.GetRequest(id="m1"), metadata=ROOT),
        grpc.StatusCode.PERMISSION_DENIED,
    )


def replace_tenant(
    request: admin_pb2.ConsolidateRequest, tenant: str
) -> admin_pb2.ConsolidateRequest:
    out = admin_pb2.ConsolidateRequest()
    out.CopyFrom(request)
    out.tenant = tenant
    return out


async def test_a_dry_run_waits_for_the_reports(admin: Admin) -> None:
    dry = admin_pb2.ConsolidateRequest(mode=admin_pb2.CONSOLIDATION_MODE_DECAY, dry_run=True)
    reply = await admin.stub.Consolidate(dry, metadata=ADMIN, timeout=5)
    [report] = reply.reports
    assert (report.run_id, report.state, report.dry_run) == (
        reply.run_id,
        admin_pb2.PASS_STATE_SUCCEEDED,
        True,
    )
    [change] = report.changes
    assert (change.kind, change.count, list(change.sample_ids)) == ("relevance", 3, ["a", "b", "c"])
    assert report.duration_s == 2.0


async def test_a_dry_run_not_done_by_the_deadline_answers_pending(admin: Admin) -> None:
    admin.control.dry_delay_s = None
    dry = admin_pb2.ConsolidateRequest(mode=admin_pb2.CONSOLIDATION_MODE_ALL, dry_run=True)
    reply = await admin.stub.Consolidate(dry, metadata=ADMIN, timeout=3)
    assert [r.state for r in reply.reports] == [admin_pb2.PASS_STATE_PENDING] * 4
    assert {r.run_id for r in reply.reports} == {reply.run_id}


async def test_status_shows_each_pass(admin: Admin) -> None:
    running = PassRun(
        "decay",
        "r9",
        RunState.RUNNING,
        trigger="schedule",
        started_at=NOW,
        phase="scan",
        done=512,
        total=2048,
        changes=(Change("relevance", 400, ("x",)),),
        resumes=1,
    )
    # Associate found the tenant unchanged when its next run was due, and skipped it.
    unchanged = PassRun(
        "associate",
        "r7",
        RunState.SUCCEEDED,
        started_at=NOW - timedelta(hours=2),
        finished_at=NOW - timedelta(hours=2) + timedelta(seconds=30),
        unchanged_checked_at=NOW - timedelta(minutes=50),
        params='{"after": 4120, "upto": 4377}',  # it read what was written since 4120
    )
    admin.control.statuses["acme"] = [
        PassStatus("decay", last_run=running, pending_run_id="r10"),
        PassStatus("associate", last_run=unchanged),
        *(PassStatus(p) for p in PASSES[2:]),
    ]
    reply = await admin.stub.ConsolidationStatus(
        admin_pb2.ConsolidationStatusRequest(), metadata=ADMIN
    )
    assert reply.tenant == "acme"
    assert [p.mode for p in reply.passes] == [
        admin_pb2.CONSOLIDATION_MODE_DECAY,
        admin_pb2.CONSOLIDATION_MODE_ASSOCIATE,
        admin_pb2.CONSOLIDATION_MODE_CLUSTER,
        admin_pb2.CONSOLIDATION_MODE_FORGET,
    ]
    decay = reply.passes[0]
    assert decay.pending_run_id == "r10"
    run = decay.last_run
    assert (run.run_id, run.state, run.phase, run.done, run.total, run.resumes) == (
        "r9",
        admin_pb2.PASS_STATE_RUNNING,
        "scan",
        512,
        2048,
        1,
    )
    assert run.duration_s == 5.0  # so far, by the gateway's clock
    assert not run.HasField("finished_at")
    assert not run.HasField("unchanged_checked_at")
    associate = reply.passes[1].last_run
    assert associate.run_id == "r7"
    assert ts_from_proto(associate.unchanged_checked_at) == NOW - timedelta(minutes=50)
    assert (associate.incremental_after, run.incremental_after) == (4120, 0)
    assert not reply.passes[2].HasField("last_run")


async def test_the_log_down_is_unavailable(admin: Admin) -> None:
    admin.control.fail = Unavailable("log down")
    await refused(admin.stub.Consolidate(DECAY, metadata=ADMIN), grpc.StatusCode.UNAVAILABLE)


# --- the NATS adapter --------------------------------------------------------------------


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    srv = start_nats(tmp_path / "nats")
    yield srv
    srv.stop()


async def test_nats_control_without_a_worker(nats_server: NatsServer) -> None:
    nc, js = await jetstream.connect(NatsSettings(url=nats_server.url), "admin-test")
    try:
        control = NatsConsolidation(js, 2.0)
        with pytest.raises(Unavailable, match="no consolidate worker"):
            await control.request("acme", "r1", ["decay"], False, NOW)
        statuses = await control.status("acme")
        assert [(s.pass_name, s.last_run) for s in statuses] == [(p, None) for p in PASSES]
    finally:
        await nc.close()


async def test_nats_control_publishes_requests_and_reads_records(nats_server: NatsServer) -> None:
    nc, js = await jetstream.connect(NatsSettings(url=nats_server.url), "admin-test")
    try:
        # What the consolidate worker sets up.
        await js.add_stream(
            StreamConfig(
                name="ENGRAM_CONSOLIDATE",
                subjects=["engram.*.consolidate.v1"],
                retention=RetentionPolicy.WORK_QUEUE,
            )
        )
        kv = await js.create_key_value(bucket="ENGRAM_CONSOLIDATE")
        record = events_pb2.ConsolidationRun(
            run_id="r1",
            tenant="acme",
            state=events_pb2.RUN_STATE_SUCCEEDED,
            trigger="request",
            started_at=ts_to_proto(NOW),
            finished_at=ts_to_proto(NOW + timedelta(seconds=90)),
            phase="scan",
            done=10,
            total=10,
            changes=[events_pb2.ConsolidationChange(kind="relevance", count=7, sample=["m1"])],
            pending_run_id="r2",
            checked_at=ts_to_proto(NOW + timedelta(hours=1)),
        )
        await kv.put("run.acme.decay", record.SerializeToString())
        control = NatsConsolidation(js, 2.0)

        await control.request("acme", "r2", ["decay", "forget"], True, NOW)
        await control.request("acme", "r2", ["decay", "forget"], True, NOW)  # a retry
        statuses = await control.status("acme")
        info = await js.stream_info("ENGRAM_CONSOLIDATE")
        raw = await js.get_msg("ENGRAM_CONSOLIDATE", info.state.first_seq)
    finally:
        await nc.close()

    assert info.state.messages == 1  # the retry carried the same Nats-Msg-Id (the run id)
    assert raw.subject == "engram.acme.consolidate.v1"
    sent = events_pb2.ConsolidateRequested.FromString(raw.data or b"")
    assert (sent.envelope.event_id, list(sent.passes), sent.dry_run) == (
        "r2",
        ["decay", "forget"],
        True,
    )
    decay = statuses[0]
    assert decay.pending_run_id == "r2"
    assert decay.last_run == PassRun(
        "decay",
        "r1",
        RunState.SUCCEEDED,
        trigger="request",
        started_at=NOW,
        finished_at=NOW + timedelta(seconds=90),
        duration_s=90.0,
        phase="scan",
        done=10,
        total=10,
        changes=(Change("relevance", 7, ("m1",)),),
        unchanged_checked_at=NOW + timedelta(hours=1),
    )
    assert statuses[1].last_run is None


# --- Sync, Rebuild, RebuildStatus (issue #5: drift repair, rebuild by replay) --------------


async def test_sync_requests_one_run_per_store_and_waits_for_dry_reports(admin: Admin) -> None:
    reply = await admin.stub.Sync(admin_pb2.SyncRequest(), metadata=ADMIN)
    assert admin.control.requests == [
        ("acme", "run-1", ("sync_vector", "sync_lexical", "sync_graph"), False)
    ]
    assert list(reply.stores) == [
        admin_pb2.STORE_VECTOR,
        admin_pb2.STORE_LEXICAL,
        admin_pb2.STORE_GRAPH,
    ]
    dry = admin_pb2.SyncRequest(stores=[admin_pb2.STORE_LEXICAL], dry_run=True)
    reply = await admin.stub.Sync(dry, metadata=ADMIN)
    assert admin.control.requests[-1] == ("acme", "run-2", ("sync_lexical",), True)
    [report] = reply.reports
    assert (report.store, report.run_id, report.state) == (
        admin_pb2.STORE_LEXICAL,
        "run-2",
        admin_pb2.PASS_STATE_SUCCEEDED,
    )
    err = await refused(
        admin.stub.Sync(admin_pb2.SyncRequest(stores=[0]), metadata=ADMIN),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert field_of(err) == "stores[0]"
    await refused(
        admin.stub.Sync(admin_pb2.SyncRequest(), metadata=RW), grpc.StatusCode.PERMISSION_DENIED
    )


async def test_rebuild_names_the_store_and_model_and_checks_them(admin: Admin) -> None:
    request = admin_pb2.RebuildRequest(store=admin_pb2.STORE_VECTOR, embedding_model="m-2")
    reply = await admin.stub.Rebuild(request, metadata=ROOT)
    assert reply.run_id == "run-1"
    assert admin.control.requests == [("_all", "run-1", ("rebuild_vector",), False)]
    assert admin.control.params == ['{"embedding_model": "m-2"}']
    await admin.stub.Rebuild(admin_pb2.RebuildRequest(store=admin_pb2.STORE_GRAPH), metadata=ROOT)
    assert admin.control.requests[-1] == ("_all", "run-2", ("rebuild_graph",), False)
    assert admin.control.params[-1] == ""
    bad = [
        (admin_pb2.RebuildRequest(), "store"),
        (
            admin_pb2.RebuildRequest(store=admin_pb2.STORE_LEXICAL, embedding_model="m"),
            "embedding_model",
        ),
        (
            admin_pb2.RebuildRequest(store=admin_pb2.STORE_VECTOR, embedding_model="a b"),
            "embedding_model",
        ),
    ]
    for request, name in bad:
        err = await refused(
            admin.stub.Rebuild(request, metadata=ROOT), grpc.StatusCode.INVALID_ARGUMENT
        )
        assert field_of(err) == name
    await refused(
        admin.stub.Rebuild(admin_pb2.RebuildRequest(store=1), metadata=RW),
        grpc.StatusCode.PERMISSION_DENIED,
    )
    assert len(admin.control.requests) == 2


async def test_rebuild_status_shows_rebuilds_across_tenants_and_the_tenants_syncs(
    admin: Admin,
) -> None:
    running = PassRun(
        "rebuild_vector",
        "r-9",
        RunState.RUNNING,
        started_at=NOW,
        phase="replay",
        done=40,
        total=100,
        params='{"generation": "v3", "previous": "", "embedding_model": "m-2"}',
    )
    admin.control.statuses["=all"] = [PassStatus("rebuild_vector", last_run=running)]
    synced = PassRun("sync_graph", "s-1", RunState.SUCCEEDED, started_at=NOW, finished_at=NOW)
    admin.control.statuses["acme"] = [PassStatus("sync_graph", last_run=synced)]

    reply = await admin.stub.RebuildStatus(
        admin_pb2.RebuildStatusRequest(tenant="acme"), metadata=ROOT
    )

    assert [s.store for s in reply.rebuilds] == [1, 2, 3]
    vector = reply.rebuilds[0].last_run
    assert (vector.run_id, vector.phase, vector.done, vector.total) == ("r-9", "replay", 40, 100)
    assert (vector.generation, vector.embedding_model) == ("v3", "m-2")
    assert vector.duration_s == 5.0  # running: so far
    assert not reply.rebuilds[1].HasField("last_run")
    assert reply.syncs[2].last_run.run_id == "s-1"
    assert reply.syncs[2].last_run.state == admin_pb2.PASS_STATE_SUCCEEDED


async def test_what_spans_tenants_needs_a_cluster_admin_token(admin: Admin) -> None:
    vector = admin_pb2.RebuildRequest(store=admin_pb2.STORE_VECTOR, embedding_model="m-2")
    calls = [
        admin.stub.Rebuild(vector, metadata=ADMIN),
        admin.stub.RebuildStatus(admin_pb2.RebuildStatusRequest(), metadata=ADMIN),
        admin.stub.RebuildStatus(admin_pb2.RebuildStatusRequest(tenant="acme"), metadata=ADMIN),
    ]
    for call in calls:
        err = await refused(call, grpc.StatusCode.PERMISSION_DENIED)
        assert "cluster-admin token" in (err.details() or "")
    assert not admin.control.requests

    await admin.stub.Rebuild(vector, metadata=ROOT)
    assert admin.control.requests == [("_all", "run-1", ("rebuild_vector",), False)]
    # Without a tenant a cluster admin sees the rebuilds and no tenant's syncs.
    reply = await admin.stub.RebuildStatus(admin_pb2.RebuildStatusRequest(), metadata=ROOT)
    assert (len(reply.rebuilds), len(reply.syncs), reply.tenant) == (3, 0, "")
    # A tenant admin keeps what concerns its tenant alone, its syncs' status included.
    await admin.stub.Sync(admin_pb2.SyncRequest(), metadata=ADMIN)
    synced = PassRun("sync_lexical", "s-1", RunState.SUCCEEDED, started_at=NOW, finished_at=NOW)
    admin.control.statuses["acme"] = [PassStatus("sync_lexical", last_run=synced)]
    status = await admin.stub.ConsolidationStatus(
        admin_pb2.ConsolidationStatusRequest(), metadata=ADMIN
    )
    assert [s.store for s in status.syncs] == [1, 2, 3]
    assert status.syncs[1].last_run.run_id == "s-1"
