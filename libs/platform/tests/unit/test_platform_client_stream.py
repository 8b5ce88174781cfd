"""A client-streaming call refused part-way: the refusal, naming the field, reaches a client
that is still sending — never grpcio's INTERNAL "Internal error from Core"."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from engram_core.errors import InvalidArgument
from engram_platform.grpc_client import open_channel
from engram_platform.grpc_server import RunningServer, start_server
from engram_platform.settings import ServiceSettings

METHOD = "/test.Upload/Send"
MESSAGES = 64
# Together far more than HTTP/2's flow-control window: the client cannot have written them
# all before the server stops reading unless the server reads on.
PAYLOAD = b"x" * 65_536


async def _refuse_the_first(requests: AsyncIterator[bytes], context: object) -> bytes:
    async for _ in requests:
        raise InvalidArgument("requests[0].memory", "refused on purpose")
    return b""


def _register(server: grpc.aio.Server) -> None:
    handler: grpc.RpcMethodHandler[bytes, bytes] = grpc.stream_unary_rpc_method_handler(
        _refuse_the_first
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("test.Upload", {"Send": handler}),)
    )


@pytest.fixture
async def server() -> AsyncIterator[RunningServer]:
    running = await start_server("upload", ServiceSettings(port=0), _register, [])
    yield running
    await running.stop(0)


async def test_a_refusal_mid_stream_reaches_the_client_after_it_has_sent_all(
    server: RunningServer,
) -> None:
    sent = 0

    async def messages() -> AsyncIterator[bytes]:
        nonlocal sent
        for _ in range(MESSAGES):
            sent += 1
            yield PAYLOAD

    async with open_channel(f"127.0.0.1:{server.port}") as channel:
        upload: grpc.aio.StreamUnaryMultiCallable[bytes, bytes] = channel.stream_unary(METHOD)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await upload(messages(), timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "refused on purpose" in (err.value.details() or "")
    assert sent == MESSAGES
