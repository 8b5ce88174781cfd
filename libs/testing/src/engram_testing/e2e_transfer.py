"""End to end through the public API: List, and `engram export` / `engram import`.

Mix `TransferEndToEnd` into a ``Test*`` class next to a conftest that provides ``stack``
(as for `GatewayEndToEnd`) started with `gateway_tokens`, so the import tenant exists and
is empty. Each test works under its own tag, so they share the dev tenant with the rest.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path
from typing import Any

from google.protobuf import field_mask_pb2, struct_pb2, timestamp_pb2

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2
from engram_testing.devstack import DEV_TOKEN, DevStack
from engram_testing.e2e import (
    AUTH,
    IMPORT_AUTH,
    IMPORT_TOKEN,
    GatewayFixture,
    Stub,
    wait_for_watermark,
)

Auth = tuple[tuple[str, str], ...]
# What a client sets and import brings back, and what the stores derive again the same way.
KEPT: tuple[str, ...] = ("id", "content", "type", "tags", "tag_prefixes", "importance")
KEPT += ("confidence", "metadata", "timestamp", "t_valid", "t_invalid", "embedding_model")
KEPT += ("archived", "entities")


def _memories(tag: str) -> list[common_pb2.MemoryInput]:
    meta = struct_pb2.Struct()
    meta.update({"ticket": "OPS-12", "owners": ["ana", "bo"], "n": 3})
    at = timestamp_pb2.Timestamp(seconds=1_700_000_000)
    return [
        common_pb2.MemoryInput(
            content="Ana chose Postgres for the billing ledger",
            type="Decision",
            tags=[tag, "team/infra"],
            importance=0.9,
            confidence=0.7,
            metadata=meta,
            timestamp=at,
            t_valid=at,
            t_invalid=timestamp_pb2.Timestamp(seconds=1_800_000_000),
        ),
        common_pb2.MemoryInput(content="Bo migrated the ledger over the weekend", tags=[tag]),
        common_pb2.MemoryInput(
            content="The ledger migration needs a rollback plan", type="Task", tags=[tag]
        ),
        common_pb2.MemoryInput(content="Ana prefers small pull requests", tags=[tag, "ana"]),
    ]


async def _listed(gateway: Stub, auth: Auth, **request: Any) -> list[gateway_pb2.ListResponse]:
    call = gateway.List(gateway_pb2.ListRequest(**request), metadata=auth, timeout=60)
    return [page async for page in call]


async def _settled(gateway: Stub, auth: Auth) -> gateway_pb2.StatsResponse:
    """The tenant's Stats once every event of it is applied."""
    for _ in range(600):
        stats = await gateway.Stats(gateway_pb2.StatsRequest(), metadata=auth)
        if stats.watermark >= stats.last_sequence:
            return stats
        await asyncio.sleep(0.1)
    raise AssertionError(f"watermark stuck at {stats.watermark} < {stats.last_sequence}")


async def _cli(stack: DevStack, token: str, *argv: str) -> str:
    """The `engram` command line as a user runs it; its stderr (progress and summary)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "engram_clients.cli",
        "--address",
        stack.gateway_address,
        "--token",
        token,
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode == 0, err.decode()
    return err.decode()


def _read(path: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    head, *lines = (json.loads(line) for line in path.read_text().splitlines())
    return head, {line["memory"]["id"]: line for line in lines}


def _user_relations(lines: dict[str, dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Client relations (the workers' own, e.g. SIMILAR_TO, come and go with consolidation)."""
    return sorted(
        (r["source_id"], r["target_id"], r["type"], r["strength"], json.dumps(r["properties"]))
        for line in lines.values()
        for r in line["relations"]
        if r["origin"] == "user"
    )


class TransferEndToEnd(GatewayFixture):
    async def test_list_pages_a_tag_and_resumes_by_cursor(self, gateway: Stub) -> None:
        tag = f"list:{uuid.uuid4().hex[:8]}"
        stored = await gateway.StoreBatch(
            gateway_pb2.StoreBatchRequest(memories=_memories(tag)), metadata=AUTH
        )
        await wait_for_watermark(gateway, stored.sequence)
        pages = await _listed(gateway, AUTH, tags=[tag], page_size=2)
        listed = [m.id for p in pages for m in p.memories]
        assert sorted(listed) == sorted(stored.ids)
        assert pages[-1].cursor == ""
        first = next(i for i, p in enumerate(pages) if p.memories and p.cursor)
        rest = await _listed(gateway, AUTH, tags=[tag], page_size=2, cursor=pages[first].cursor)
        after = [m.id for p in pages[first + 1 :] for m in p.memories]
        assert [m.id for p in rest for m in p.memories] == after
        decisions = await _listed(gateway, AUTH, tags=[tag], types=["Decision"])
        assert [m.content for p in decisions for m in p.memories] == [
            "Ana chose Postgres for the billing ledger"
        ]
        assert not [m for p in await _listed(gateway, IMPORT_AUTH, tags=[tag]) for m in p.memories]

    async def test_list_is_in_sequence_order_and_an_update_moves_a_memory_last(
        self, gateway: Stub
    ) -> None:
        tag = f"seq:{uuid.uuid4().hex[:8]}"
        stored = await gateway.StoreBatch(
            gateway_pb2.StoreBatchRequest(memories=_memories(tag)), metadata=AUTH
        )
        await wait_for_watermark(gateway, stored.sequence)
        pages = await _listed(gateway, AUTH, tags=[tag], page_size=2)
        before = [m for p in pages for m in p.memories]
        assert [m.version for m in before] == sorted(m.version for m in before)
        first = before[0]
        updated = await gateway.Update(
            gateway_pb2.UpdateRequest(
                id=first.id,
                memory=common_pb2.MemoryInput(content="Ana chose Postgres, then CockroachDB"),
                update_mask=field_mask_pb2.FieldMask(paths=["content"]),
            ),
            metadata=AUTH,
        )
        await wait_for_watermark(gateway, updated.sequence)
        # Resuming after the first page brings the rest, then what changed since.
        resumed = await _listed(gateway, AUTH, tags=[tag], page_size=2, cursor=pages[0].cursor)
        got = [m for p in resumed for m in p.memories]
        rest = [m.id for m in before[len(pages[0].memories) :]]
        assert [m.id for m in got] == [*rest, first.id]
        assert got[-1].content == "Ana chose Postgres, then CockroachDB"
        assert got[-1].version == updated.sequence
        again = [m.id for p in await _listed(gateway, AUTH, tags=[tag]) for m in p.memories]
        assert again == [m.id for m in before[1:]] + [first.id]

    async def test_export_then_import_into_an_empty_tenant_keeps_every_field_and_relation(
        self, gateway: Stub, stack: DevStack, tmp_path: Path
    ) -> None:
        tag = f"transfer:{uuid.uuid4().hex[:8]}"
        stored = await gateway.StoreBatch(
            gateway_pb2.StoreBatchRequest(memories=_memories(tag)), metadata=AUTH
        )
        ids = list(stored.ids)
        await wait_for_watermark(gateway, stored.sequence)
        link = gateway_pb2.AssociateRequest(
            source_id=ids[0], target_id=ids[1], type="LEADS_TO", strength=0.7
        )
        link.properties.update({"why": "the decision led to the migration"})
        await gateway.Associate(link, metadata=AUTH)
        last = await gateway.Associate(
            gateway_pb2.AssociateRequest(
                source_id=ids[2], target_id=ids[1], type="DERIVED_FROM", strength=0.4
            ),
            metadata=AUTH,
        )
        await wait_for_watermark(gateway, last.sequence)
        assert sum((await _settled(gateway, IMPORT_AUTH)).counts.values()) == 0

        exported = tmp_path / "exported.jsonl"
        await _cli(stack, DEV_TOKEN, "export", "--tag", tag, "-o", str(exported))
        head, source = _read(exported)
        assert (head["format"], head["version"]) == ("engram-export", 1)
        assert head["embedding_model"]
        assert sorted(source) == sorted(ids)
        assert len(_user_relations(source)) == 2

        summary = await _cli(stack, IMPORT_TOKEN, "import", str(exported))
        assert "imported 4 memories (0 already there), 2 relations" in summary
        counts = dict((await _settled(gateway, IMPORT_AUTH)).counts)
        copied = tmp_path / "copied.jsonl"
        await _cli(stack, IMPORT_TOKEN, "export", "--tag", tag, "-o", str(copied))
        _, target = _read(copied)
        assert sorted(target) == sorted(ids)
        for mid, line in source.items():
            got, want = target[mid]["memory"], line["memory"]
            assert {k: got[k] for k in KEPT} == {k: want[k] for k in KEPT}
            assert got["tenant"] != want["tenant"]
        assert _user_relations(target) == _user_relations(source)

        again = await _cli(stack, IMPORT_TOKEN, "import", str(exported))
        assert "imported 0 memories (4 already there)" in again
        assert dict((await _settled(gateway, IMPORT_AUTH)).counts) == counts
        await _cli(stack, IMPORT_TOKEN, "export", "--tag", tag, "-o", str(copied))
        assert _user_relations(_read(copied)[1]) == _user_relations(source)
