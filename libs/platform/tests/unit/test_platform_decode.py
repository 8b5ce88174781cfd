"""Requests that do not decode: every server answers INVALID_ARGUMENT naming the field (not
grpcio's UNKNOWN), and `locate` names it by its proto path."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from google.protobuf import struct_pb2
from google.protobuf.message import DecodeError

from engram.common.v1 import common_pb2
from engram.scoring.v1 import scoring_pb2, scoring_pb2_grpc
from engram_core.errors import InvalidArgument
from engram_platform.decode import ROOT, Malformed, locate, tolerant
from engram_platform.grpc_client import open_channel, translate_errors
from engram_platform.grpc_server import RunningServer, start_server
from engram_platform.settings import ServiceSettings

MARK = b"MARKMARK"
BAD = b"\xff\xfe\xc0\x80" * 2


def corrupt(message: scoring_pb2.RankRequest) -> bytes:
    raw = message.SerializeToString()
    assert raw.count(MARK) == 1
    return raw.replace(MARK, BAD)


def candidate(
    content: str = "c", metadata: dict[str, object] | None = None
) -> scoring_pb2.Candidate:
    meta = struct_pb2.Struct()
    meta.update(metadata or {})
    return scoring_pb2.Candidate(memory=common_pb2.Memory(id="m", content=content, metadata=meta))


@pytest.mark.parametrize(
    ("raw", "field", "reason"),
    [
        (corrupt(scoring_pb2.RankRequest(query="MARKMARK")), "query", "UTF-8"),
        (
            corrupt(scoring_pb2.RankRequest(candidates=[candidate(), candidate("MARKMARK")])),
            "candidates[1].memory.content",
            "UTF-8",
        ),
        (
            corrupt(
                scoring_pb2.RankRequest(
                    candidates=[candidate(metadata={"a": {"b": ["x", "MARKMARK"]}})]
                )
            ),
            "candidates[0].memory.metadata.a.b[1]",
            "UTF-8",
        ),
        (
            corrupt(scoring_pb2.RankRequest(candidates=[candidate(metadata={"MARKMARK": 1})])),
            "candidates[0].memory.metadata",
            "key",
        ),
        (corrupt(scoring_pb2.RankRequest(query_tags=["a", "MARKMARK"])), "query_tags[1]", "UTF-8"),
        (b"\x0a\x09abc", "query", "truncated"),
        (b"\x12\x03\x0a\x09a", "candidates[0].memory", "truncated"),
        (b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80", ROOT, "truncated"),
    ],
)
def test_locate_names_the_field_by_its_proto_path(raw: bytes, field: str, reason: str) -> None:
    with pytest.raises(DecodeError):
        scoring_pb2.RankRequest.FromString(raw)
    got = locate(scoring_pb2.RankRequest, raw)
    assert got.field == field
    assert reason in got.reason


def test_a_tolerant_deserializer_returns_the_message_or_malformed() -> None:
    deserialize = tolerant(scoring_pb2.RankRequest.FromString)
    assert deserialize is not None
    good = scoring_pb2.RankRequest(query="q")
    assert deserialize(good.SerializeToString()) == good
    assert deserialize(b"\x0a\x09abc") == Malformed(
        "query", locate(scoring_pb2.RankRequest, b"\x0a\x09abc").reason
    )
    assert tolerant(None) is None


class _Servicer(scoring_pb2_grpc.ScoringServiceServicer):
    async def Rank(  # noqa: N802 - generated name
        self, request: scoring_pb2.RankRequest, context: object
    ) -> scoring_pb2.RankResponse:
        return scoring_pb2.RankResponse()


@pytest.fixture
async def server() -> AsyncIterator[RunningServer]:
    running = await start_server(
        "scoring",
        ServiceSettings(port=0),
        lambda s: scoring_pb2_grpc.add_ScoringServiceServicer_to_server(_Servicer(), s),
        [scoring_pb2.DESCRIPTOR.services_by_name["ScoringService"].full_name],
    )
    yield running
    await running.stop(0)


async def test_a_server_refuses_undecodable_bytes_naming_the_field(server: RunningServer) -> None:
    async with open_channel(f"127.0.0.1:{server.port}") as channel:
        raw_rank = channel.unary_unary(
            "/engram.scoring.v1.ScoringService/Rank",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await raw_rank(corrupt(scoring_pb2.RankRequest(query="MARKMARK")))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(InvalidArgument) as caught:
            async with translate_errors("scoring"):
                await raw_rank(corrupt(scoring_pb2.RankRequest(query_tags=["MARKMARK"])))
        assert caught.value.field == "query_tags[0]"
        stub = scoring_pb2_grpc.ScoringServiceStub(channel)
        await stub.Rank(scoring_pb2.RankRequest(query="still answers"))


async def test_a_field_path_with_any_characters_reaches_the_client(server: RunningServer) -> None:
    # A Struct key is the client's: a control character or non-ASCII in the named field must
    # not turn the answer into INTERNAL ("invalid metadata").
    async with open_channel(f"127.0.0.1:{server.port}") as channel:
        raw_rank = channel.unary_unary(
            "/engram.scoring.v1.ScoringService/Rank",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        key = "k\x1dé"
        bad = corrupt(scoring_pb2.RankRequest(candidates=[candidate(metadata={key: "MARKMARK"})]))
        with pytest.raises(InvalidArgument) as caught:
            async with translate_errors("scoring"):
                await raw_rank(bad)
        assert caught.value.field == "candidates[0].memory.metadata.k\\x1d\\xe9"


class _Counting:
    """RankRequest's parser, counting the bytes it is given."""

    DESCRIPTOR = scoring_pb2.RankRequest.DESCRIPTOR
    parsed = 0

    @classmethod
    def FromString(cls, data: bytes) -> scoring_pb2.RankRequest:  # noqa: N802 - protobuf's name
        cls.parsed += len(data)
        return scoring_pb2.RankRequest.FromString(data)


def _delimited(number: int, payload: bytes) -> bytes:
    size, n = bytearray(), len(payload)
    while n > 0x7F:
        size.append(n & 0x7F | 0x80)
        n >>= 7
    size.append(n)
    return bytes([number << 3 | 2]) + bytes(size) + payload


def _deep_metadata(levels: int) -> bytes:
    """A RankRequest whose one candidate's metadata nests ``levels`` objects under "a"."""
    struct_bytes = b""
    for _ in range(levels):
        entry = _delimited(1, b"a") + _delimited(2, _delimited(5, struct_bytes))
        struct_bytes = _delimited(1, entry)
    memory = _delimited(2, b"content") + _delimited(9, struct_bytes)  # Memory.metadata = 9
    return _delimited(2, _delimited(1, memory))  # candidates[0].memory


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        # Wider than the fields told apart: the request is named, not searched field by field.
        (b"".join(_delimited(6, b"ab") for _ in range(20_000)) + _delimited(6, BAD), ROOT),
        (_delimited(6, b"x" * 1_000_000) + _delimited(6, BAD), "query_tags[1]"),
    ],
)
def test_a_hostile_request_costs_a_bounded_multiple_of_its_size(raw: bytes, field: str) -> None:
    _Counting.parsed = 0
    got = locate(_Counting, raw)  # type: ignore[arg-type]
    assert got.field == field
    assert _Counting.parsed <= 17 * len(raw) + (1 << 20)


def test_deep_nesting_is_followed_as_far_as_protobuf_allows() -> None:
    raw = _deep_metadata(3_000)
    with pytest.raises(DecodeError):
        scoring_pb2.RankRequest.FromString(raw)
    _Counting.parsed = 0
    got = locate(_Counting, raw)  # type: ignore[arg-type]
    assert got.field.startswith("candidates[0].memory.metadata.a.a.a")
    assert "nested" in got.reason or "valid" in got.reason
    assert _Counting.parsed <= 17 * len(raw) + (1 << 20)
