"""Memory <-> proto: every field round-trips, the slim form for ranking holds exactly
the fields ranking reads, and the memos of both directions never serve a stale memory."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from google.protobuf.timestamp_pb2 import Timestamp

from engram.common.v1 import common_pb2
from engram.vector.v1 import vector_pb2
from engram_core.model import Hit, Memory
from engram_core.scoring import SCORED_FIELDS
from engram_platform.convert import (
    add_hits,
    add_memories,
    memory_from_proto,
    memory_to_proto,
    ts_from_proto,
    ts_to_proto,
)

NOW = datetime(2025, 1, 1, tzinfo=UTC)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# Every field away from its default, so a field left out of the proto shows.
FULL = Memory(
    id="a",
    tenant="t",
    content="Sarah picked Postgres",
    type="Decision",
    tags=("project:atlas",),
    tag_prefixes=("project",),
    importance=0.7,
    confidence=0.8,
    metadata={"ticket": "OPS-12", "nested": {"ok": True}},
    timestamp=NOW,
    updated_at=NOW + timedelta(days=1),
    last_accessed=NOW + timedelta(days=2),
    access_count=3,
    t_valid=NOW - timedelta(days=3),
    t_invalid=NOW + timedelta(days=4),
    relevance_score=0.4,
    archived=True,
    embedding_model="m",
    version=2,
    entities=("person:sarah",),
)


def test_every_field_round_trips() -> None:
    assert memory_from_proto(memory_to_proto(FULL)) == FULL


def test_timestamps_read_as_protobuf_reads_them() -> None:
    for seconds, nanos in [(1764680000, 123456789), (0, 999), (-5, 500_000_000), (-1, 1)]:
        ts = Timestamp(seconds=seconds, nanos=nanos)
        assert ts_from_proto(ts) == ts.ToDatetime(tzinfo=UTC)
        assert ts_to_proto(ts_from_proto(ts)) == Timestamp(
            seconds=seconds, nanos=nanos // 1000 * 1000
        )


def test_optional_timestamps_stay_unset() -> None:
    bare = replace(FULL, last_accessed=None, t_valid=None, t_invalid=None)
    p = memory_to_proto(bare)
    assert not any(p.HasField(n) for n in ("last_accessed", "t_valid", "t_invalid"))
    assert memory_from_proto(p) == bare


def test_scored_only_sets_the_scored_fields_and_no_other() -> None:
    slim = memory_to_proto(FULL, scored_only=True)
    assert {f.name for f, _ in slim.ListFields()} == SCORED_FIELDS
    assert memory_from_proto(slim) == replace(
        FULL,
        tenant="",
        updated_at=EPOCH,
        last_accessed=None,
        access_count=0,
        t_valid=None,
        t_invalid=None,
        archived=False,
        embedding_model="",
        version=0,
        entities=(),
    )


# Both directions are memoised (a recall meets the same memories many times): a memo must
# never hand back what another memory, or another version of this one, encoded to.


def test_decoding_the_same_bytes_gives_the_same_memory_and_other_bytes_another() -> None:
    p = memory_to_proto(FULL)
    first = memory_from_proto(p)
    assert memory_from_proto(common_pb2.Memory.FromString(p.SerializeToString())) is first
    p.access_count += 1
    assert memory_from_proto(p) == replace(FULL, access_count=FULL.access_count + 1)
    assert first.access_count == FULL.access_count


def test_an_encoded_memory_is_not_mistaken_for_an_equal_looking_one() -> None:
    memory_to_proto(FULL)
    edits: list[dict[str, object]] = [{}, {"content": "Sarah picked MySQL"}, {"version": 3}]
    for edit in edits:
        changed = replace(FULL, **edit)  # type: ignore[arg-type]
        assert memory_from_proto(memory_to_proto(changed)) == changed
    assert memory_to_proto(FULL, scored_only=True) != memory_to_proto(FULL)


def test_a_returned_message_is_the_callers_to_change() -> None:
    p = memory_to_proto(FULL)
    p.content = "edited"
    assert memory_to_proto(FULL).content == FULL.content


def test_memories_and_hits_append_to_repeated_fields() -> None:
    other = replace(FULL, id="b", metadata={}, last_accessed=None)
    search = vector_pb2.SearchResponse()
    add_hits(search.hits, [Hit(id="a", score=0.5, memory=FULL), Hit(id="gone", score=0.25)])
    assert [(h.id, h.score, h.HasField("memory")) for h in search.hits] == [
        ("a", 0.5, True),
        ("gone", 0.25, False),
    ]
    assert memory_from_proto(search.hits[0].memory) == FULL
    got = vector_pb2.GetResponse()
    add_memories(got.memories, [other, FULL])
    assert [memory_from_proto(m) for m in got.memories] == [other, FULL]
