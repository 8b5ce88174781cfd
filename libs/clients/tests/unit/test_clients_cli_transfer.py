"""`engram export` and `engram import` against a fake gateway: the file, keys, relations."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2, timestamp_pb2

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram_clients.cli import main

A = "0190f3a4-7b1c-7d2e-8f00-00000000000a"
B = "0190f3a4-7b1c-7d2e-8f00-00000000000b"
C = "0190f3a4-7b1c-7d2e-8f00-00000000000c"


def stored(id: str, content: str) -> common_pb2.Memory:
    meta = struct_pb2.Struct()
    meta.update({"ticket": "OPS-12", "n": 3})
    return common_pb2.Memory(
        id=id,
        tenant="acme",
        content=content,
        type="Decision",
        tags=["db", "team:infra"],
        importance=0.8,
        confidence=0.6,
        metadata=meta,
        timestamp=timestamp_pb2.Timestamp(seconds=1_700_000_000),
        t_valid=timestamp_pb2.Timestamp(seconds=1_700_000_100),
        embedding_model="e5-small",
        version=4,
    )


class Gateway(gateway_pb2_grpc.MemoryServiceServicer):
    """Lists two pages; stores by idempotency key; relates only memories it holds."""

    def __init__(self) -> None:
        self.lists: list[Any] = []
        self.batches: list[Any] = []
        self.keys: dict[str, str] = {}
        self.associated: list[Any] = []
        self.recalls: list[Any] = []
        self.fail_id = ""  # a memory this gateway never acknowledges

    def List(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.lists.append(request)
        rel = common_pb2.Relation(source_id=A, target_id=B, type="LEADS_TO", strength=0.7)
        rel.properties.update({"why": "x"})
        sys_rel = common_pb2.Relation(
            source_id=B, target_id=A, type="SIMILAR_TO", strength=0.9, origin="system"
        )
        yield gateway_pb2.ListResponse(memories=[stored(A, "one")], relations=[rel], cursor=B)
        yield gateway_pb2.ListResponse(memories=[stored(B, "two")], relations=[sys_rel])

    def StoreBatch(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.batches.append(request)
        results = []
        for m, key in zip(request.memories, request.idempotency_keys, strict=True):
            if m.id == self.fail_id:
                results.append(gateway_pb2.StoreResult(code="UNAVAILABLE", message="log down"))
                continue
            dup = key in self.keys
            self.keys.setdefault(key, m.id)
            results.append(gateway_pb2.StoreResult(id=m.id, sequence=9, duplicate=dup))
        return gateway_pb2.StoreBatchResponse(results=results, sequence=9)

    def Recall(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.recalls.append(request)
        return gateway_pb2.RecallResponse()

    def Associate(self, request: Any, context: Any) -> Any:  # noqa: N802
        held = set(self.keys.values())
        if request.source_id not in held or request.target_id not in held:
            context.abort(grpc.StatusCode.NOT_FOUND, "target_id not found")
        self.associated.append(request)
        return gateway_pb2.AssociateResponse(sequence=10)


@pytest.fixture
def gateway() -> Iterator[tuple[str, Gateway]]:
    fake = Gateway()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    gateway_pb2_grpc.add_MemoryServiceServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", fake
    finally:
        server.stop(0)


def run(addr: str, *argv: str) -> int:
    return main(["--addr", addr, *argv])


def test_export_writes_a_header_then_each_memory_with_its_relations(
    gateway: tuple[str, Gateway], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    addr, fake = gateway
    out = tmp_path / "acme.jsonl"
    assert run(addr, "export", "--tag", "db", "--type", "Decision", "-o", str(out)) == 0
    [request] = fake.lists
    assert (list(request.tags), list(request.types)) == (["db"], ["Decision"])
    assert request.include_relations
    head, first, second = (json.loads(line) for line in out.read_text().splitlines())
    assert (head["format"], head["version"], head["embedding_model"]) == (
        "engram-export",
        1,
        "e5-small",
    )
    m = first["memory"]
    assert (m["id"], m["content"], m["metadata"], m["timestamp"]) == (
        A,
        "one",
        {"ticket": "OPS-12", "n": 3.0},
        "2023-11-14T22:13:20Z",
    )
    assert (m["importance"], m["version"], m["archived"]) == (0.8, "4", False)  # every field
    assert [(r["target_id"], r["properties"]) for r in first["relations"]] == [(B, {"why": "x"})]
    assert [r["origin"] for r in second["relations"]] == ["system"]
    assert "exported 2 memories" in capsys.readouterr().err


def test_export_to_stdout_by_default(
    gateway: tuple[str, Gateway], capsys: pytest.CaptureFixture[str]
) -> None:
    addr, _ = gateway
    assert run(addr, "export") == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    assert json.loads(lines[0])["format"] == "engram-export"


def test_import_keeps_ids_keys_them_by_id_and_relates_after_the_stores_apply(
    gateway: tuple[str, Gateway], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    addr, fake = gateway
    out = tmp_path / "acme.jsonl"
    assert run(addr, "export", "-o", str(out)) == 0
    assert run(addr, "import", str(out), "--batch-size", "1") == 0
    assert [list(b.idempotency_keys) for b in fake.batches] == [[f"import:{A}"], [f"import:{B}"]]
    first = fake.batches[0].memories[0]
    assert (first.id, first.type, list(first.tags), first.importance) == (
        A,
        "Decision",
        ["db", "team:infra"],
        pytest.approx(0.8),
    )
    assert first.metadata["ticket"] == "OPS-12"
    assert first.timestamp.seconds == 1_700_000_000
    assert first.t_valid.seconds == 1_700_000_100
    assert not first.HasField("t_invalid")
    # The relation after a recall that waits for the batch's sequence; system edges skipped.
    assert [r.min_sequence for r in fake.recalls] == [9]
    assert [(r.source_id, r.type, r.properties["why"]) for r in fake.associated] == [
        (A, "LEADS_TO", "x")
    ]
    assert "imported 2 memories (0 already there), 1 relations" in capsys.readouterr().err


def test_a_second_import_stores_nothing_new(
    gateway: tuple[str, Gateway], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    addr, fake = gateway
    out = tmp_path / "acme.jsonl"
    run(addr, "export", "-o", str(out))
    run(addr, "import", str(out))
    capsys.readouterr()
    assert run(addr, "import", str(out)) == 0
    assert "imported 0 memories (2 already there)" in capsys.readouterr().err
    assert len(fake.keys) == 2


def test_a_relation_to_a_memory_not_there_is_skipped(
    gateway: tuple[str, Gateway], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    addr, fake = gateway
    out = tmp_path / "acme.jsonl"
    run(addr, "export", "-o", str(out))
    lines = out.read_text().splitlines()
    out.write_text("\n".join(lines[:2]) + "\n")  # B, the relation's target, left out
    assert run(addr, "import", str(out)) == 0
    assert fake.associated == []
    assert "0 relations (1 to missing memories skipped)" in capsys.readouterr().err


def test_an_item_not_stored_fails_the_import_and_says_to_run_it_again(
    gateway: tuple[str, Gateway], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    addr, fake = gateway
    out = tmp_path / "acme.jsonl"
    run(addr, "export", "-o", str(out))
    fake.fail_id = B
    assert run(addr, "import", str(out)) == 1
    err = capsys.readouterr().err
    assert "1 memories not stored (UNAVAILABLE: log down)" in err
    assert "run the import again" in err
    assert fake.associated == []
    # The SDK sent the unacknowledged item again under its key, and only it.
    resent = [list(b.idempotency_keys) for b in fake.batches[1:]]
    assert resent
    assert all(keys == [f"import:{B}"] for keys in resent)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("not json\n", "line 1: not an export header"),
        ('{"format": "other"}\n', "line 1: not an engram-export header"),
        ('{"format": "engram-export", "version": 2}\n', "format version 2"),
        ('{"format": "engram-export", "version": 1}\n{"memory": 5}\n', "line 2:"),
    ],
)
def test_a_file_that_is_not_an_export_is_refused_naming_the_line(
    gateway: tuple[str, Gateway],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    text: str,
    says: str,
) -> None:
    addr, fake = gateway
    bad = tmp_path / "bad.jsonl"
    bad.write_text(text)
    assert run(addr, "import", str(bad)) == 1
    assert says in capsys.readouterr().err
    assert fake.batches == []


def test_an_unset_time_is_written_as_null_and_read_back_unset(
    gateway: tuple[str, Gateway], tmp_path: Path
) -> None:
    addr, fake = gateway
    out = tmp_path / "acme.jsonl"
    run(addr, "export", "-o", str(out))
    line = json.loads(out.read_text().splitlines()[1])
    assert (line["memory"]["t_invalid"], line["memory"]["last_accessed"]) == (None, None)
    run(addr, "import", str(out))
    assert not fake.batches[0].memories[0].HasField("t_invalid")
