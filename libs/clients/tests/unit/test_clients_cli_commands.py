"""`engram update`, `list`, `subscribe` and `delete-tenant` against a fake gateway, the
connection settings from the environment, and how a refused call is reported."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from engram.common.v1 import common_pb2
from engram.gateway.v1 import admin_pb2, admin_pb2_grpc, gateway_pb2, gateway_pb2_grpc
from engram_clients.cli import main

Kind = gateway_pb2.SubscribeResponse


class Gateway(gateway_pb2_grpc.MemoryServiceServicer):
    def __init__(self) -> None:
        self.seen: list[Any] = []
        self.metadata: list[dict[str, Any]] = []
        self.live = False  # Subscribe: hold the stream open after the events, as live ones do

    def Update(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.seen.append(request)
        if request.memory.importance > 1:
            context.set_trailing_metadata((("engram-field", "memory.importance"),))
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "importance: must be in [0, 1]")
        return gateway_pb2.UpdateResponse(id=request.id, sequence=12)

    def List(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.seen.append(request)
        first = [common_pb2.Memory(id="m1", content="one"), common_pb2.Memory(id="m2")]
        yield gateway_pb2.ListResponse(memories=first, cursor="m2")
        yield gateway_pb2.ListResponse(memories=[common_pb2.Memory(id="m3")])

    def Subscribe(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.seen.append(request)
        self.metadata.append(dict(context.invocation_metadata()))
        memory = common_pb2.Memory(id="m7", content="the crane is booked")
        relation = common_pb2.Relation(source_id="m7", target_id="m8", type="LEADS_TO")
        yield Kind(sequence=41, kind=Kind.MEMORY_STORED, memory_id="m7", memory=memory)
        yield Kind(sequence=42, kind=Kind.RELATION_ADDED, memory_id="m7", relation=relation)
        yield Kind(sequence=43, kind=Kind.MEMORY_DELETED, memory_id="m8")
        while self.live and context.is_active():
            time.sleep(0.05)


class Admin(admin_pb2_grpc.AdminServiceServicer):
    def __init__(self) -> None:
        self.seen: list[Any] = []

    def DeleteTenant(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.seen.append(request)
        if not request.dry_run and request.confirm != request.tenant:
            context.set_trailing_metadata((("engram-field", "confirm"),))
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "confirm: repeat the tenant's name")
        counts = [admin_pb2.TenantCount(store="vector", count=5)]
        sequence = 0 if request.dry_run else 90
        return admin_pb2.DeleteTenantResponse(
            tenant=request.tenant, dry_run=request.dry_run, sequence=sequence, counts=counts
        )

    def DeleteTenantStatus(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.seen.append(request)
        applied = len([r for r in self.seen if isinstance(r, type(request))]) >= 2
        return admin_pb2.DeleteTenantStatusResponse(
            tenant=request.tenant, sequence=request.sequence, applied=applied
        )


@pytest.fixture
def served() -> Iterator[tuple[str, Gateway, Admin]]:
    gateway, admin = Gateway(), Admin()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    gateway_pb2_grpc.add_MemoryServiceServicer_to_server(gateway, server)
    admin_pb2_grpc.add_AdminServiceServicer_to_server(admin, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", gateway, admin
    finally:
        server.stop(0)


def test_update_sends_only_the_fields_its_flags_give(
    served: tuple[str, Gateway, Admin], capsys: pytest.CaptureFixture[str]
) -> None:
    addr, fake, _ = served
    argv = ["--address", addr, "update", "m1", "--tag", "db", "--importance", "0.4"]
    assert main([*argv, "--memory", '{"metadata": {"by": "ana"}}']) == 0
    [sent] = fake.seen
    assert sorted(sent.update_mask.paths) == ["importance", "metadata", "tags"]
    assert (list(sent.memory.tags), sent.memory.metadata["by"]) == (["db"], "ana")
    assert '"sequence": "12"' in capsys.readouterr().out


def test_a_refused_call_prints_the_code_and_the_field_and_exits_1(
    served: tuple[str, Gateway, Admin], capsys: pytest.CaptureFixture[str]
) -> None:
    addr, _, _ = served
    assert main(["--address", addr, "update", "m1", "--importance", "2"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == (
        "INVALID_ARGUMENT: importance: must be in [0, 1] (field: memory.importance)"
    )


def test_list_prints_a_json_line_per_memory_across_pages(
    served: tuple[str, Gateway, Admin], capsys: pytest.CaptureFixture[str]
) -> None:
    addr, fake, _ = served
    assert main(["--address", addr, "list", "--tag", "db", "--type", "Decision"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == '{"id": "m1", "content": "one"}'
    assert [line.split('"')[3] for line in lines] == ["m1", "m2", "m3"]
    [sent] = fake.seen
    assert (list(sent.tags), list(sent.types)) == (["db"], ["Decision"])
    assert main(["--address", addr, "list", "--limit", "2"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_subscribe_prints_a_line_per_event_from_the_sequence_asked(
    served: tuple[str, Gateway, Admin], capsys: pytest.CaptureFixture[str]
) -> None:
    addr, fake, _ = served
    argv = ["--address", addr, "subscribe", "--tag", "harbour", "--from-sequence", "41"]
    assert main(argv) == 0  # this fake ends the stream after its events
    assert capsys.readouterr().out.splitlines() == [
        '41 stored m7 "the crane is booked"',
        "42 relation_added m7 LEADS_TO -> m8",
        "43 deleted m8",
    ]
    [sent] = fake.seen
    assert (sent.after_sequence, list(sent.tags)) == (40, ["harbour"])  # from 41 = after 40
    assert main(["--address", addr, "subscribe", "--json"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith('{"sequence": "41", "kind": "MEMORY_STORED"')
    assert not fake.seen[1].HasField("after_sequence")  # no flag: only new events


def test_subscribe_runs_until_ctrl_c_and_ends_quietly(served: tuple[str, Gateway, Admin]) -> None:
    addr, fake, _ = served
    fake.live = True
    cli = [sys.executable, "-m", "engram_clients.cli", "subscribe"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env |= {"ENGRAM_ADDRESS": addr, "ENGRAM_TOKEN": "agent-7"}  # no flags: the environment
    proc = subprocess.Popen(cli, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    # Each line as its event comes, while the stream stays open.
    lines = [proc.stdout.readline() for _ in range(3)]
    assert lines[0].startswith(b"41 stored m7")
    assert lines[2].startswith(b"43 deleted m8")
    assert proc.poll() is None
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert b"Traceback" not in err
    assert fake.metadata[0]["authorization"] == "Bearer agent-7"


def test_delete_tenant_needs_the_name_again_or_a_dry_run(
    served: tuple[str, Gateway, Admin], capsys: pytest.CaptureFixture[str]
) -> None:
    addr, _, admin = served
    with pytest.raises(SystemExit) as usage:
        main(["--address", addr, "delete-tenant", "acme"])
    assert usage.value.code == 2
    assert "--confirm" in capsys.readouterr().err
    assert admin.seen == []  # nothing was sent
    assert main(["--address", addr, "delete-tenant", "acme", "--dry-run"]) == 0
    assert '"count": "5"' in capsys.readouterr().out
    assert main(["--address", addr, "delete-tenant", "acme", "--confirm", "acne"]) == 1
    assert "(field: confirm)" in capsys.readouterr().err


def test_delete_tenant_wait_polls_until_applied(
    served: tuple[str, Gateway, Admin], capsys: pytest.CaptureFixture[str]
) -> None:
    addr, _, admin = served
    argv = ["--address", addr, "delete-tenant", "acme", "--confirm", "acme", "--wait"]
    assert main([*argv, "--poll", "0.01"]) == 0
    _, first, second = admin.seen
    assert (first.tenant, first.sequence, second.sequence) == ("acme", 90, 90)
    assert '"applied": true' in capsys.readouterr().out
