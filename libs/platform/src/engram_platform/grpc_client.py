"""Channels to internal services, with trace propagation, RPC metrics and error translation."""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import grpc

from engram_platform.errors import from_rpc_error
from engram_platform.reloading import Reloading
from engram_platform.rotating_channel import RotatingChannel
from engram_platform.rpc_metrics import duration_histogram, elapsed_ms, rpc_attributes
from engram_platform.settings import ClientTlsSettings
from engram_platform.telemetry import inject_context
from engram_platform.tls import reloading_channel_credentials


def _with_trace(details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
    carrier = inject_context()
    if not carrier:
        return details
    metadata = grpc.aio.Metadata(*(details.metadata or ()))
    for key, value in carrier.items():
        metadata.add(key, value)
    return grpc.aio.ClientCallDetails(
        details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
    )


_DURATION = duration_histogram("client")


async def _observed(
    start: Callable[[grpc.aio.ClientCallDetails], Awaitable[Any]],
    details: grpc.aio.ClientCallDetails,
) -> Any:
    """Start the call with the trace context and record its duration once it ends; the
    call goes back to the caller, whose await gives the reply or raises as without us."""
    started = time.perf_counter()
    code = grpc.StatusCode.UNKNOWN
    call = None
    try:
        call = await start(_with_trace(details))
        code = await call.code()  # waits for the end of the call; never raises its error
        return call
    except asyncio.CancelledError:
        # The caller gave up while we waited: the call must end too, as it would have
        # had the caller awaited it directly.
        code = grpc.StatusCode.CANCELLED
        if call is not None:
            call.cancel()
        raise
    finally:
        _DURATION.record(elapsed_ms(started), rpc_attributes(details.method, code))


class _Unary(grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        return await _observed(lambda d: continuation(d, request), details)


class _StreamUnary(grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(
        self, continuation: Callable[..., Any], details: grpc.aio.ClientCallDetails, requests: Any
    ) -> Any:
        return await _observed(lambda d: continuation(d, requests), details)


# Targets that name a resolver: balanced over every address the name resolves to.
BALANCED_SCHEMES = ("dns:", "ipv4:", "ipv6:")


def channel_options(target: str, max_message_bytes: int) -> list[tuple[str, str | int]]:
    """The channel arguments of ``open_channel`` for ``target``."""
    options: list[tuple[str, str | int]] = [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.keepalive_time_ms", 30_000),
    ]
    if target.startswith(BALANCED_SCHEMES):
        options += [
            ("grpc.lb_policy_name", "round_robin"),
            # gRPC's default backoff grows to 120 s: a restarted replica would wait.
            ("grpc.max_reconnect_backoff_ms", 1_000),
            ("grpc.dns_min_time_between_resolutions_ms", 1_000),
        ]
    return options


def open_channel(
    target: str,
    max_message_bytes: int = 8 * 1024 * 1024,
    credentials: grpc.ChannelCredentials | None = None,
    server_name: str = "",
) -> grpc.aio.Channel:
    """A channel with trace propagation, ``rpc.client.duration`` and the message limit;
    TLS with ``credentials``, the server's certificate checked against ``server_name`` when
    given, else the host.

    A target naming a resolver (``dns:///vector.engram.svc:50051``, a headless Kubernetes
    Service; ``ipv4:10.0.0.1:50051,10.0.0.2:50051``) spreads its calls round robin over
    every address, tries a lost connection again within a second and resolves the name
    again at most every second, so a replica that restarts elsewhere takes calls at once.
    A plain ``host:port`` is one connection, made again by the first call after it was lost.
    """
    options = channel_options(target, max_message_bytes)
    interceptors = [_Unary(), _StreamUnary()]
    if credentials is None:
        return grpc.aio.insecure_channel(target, options=options, interceptors=interceptors)
    if server_name:
        options.append(("grpc.ssl_target_name_override", server_name))
    return grpc.aio.secure_channel(target, credentials, options, interceptors=interceptors)


@asynccontextmanager
async def translate_errors(target: str) -> AsyncIterator[None]:
    """Inside, a failed RPC surfaces as the catalog error its status code stands for."""
    try:
        yield
    except grpc.aio.AioRpcError as err:
        raise from_rpc_error(err, target) from err


async def call(target: str, awaitable: Awaitable[Any]) -> Any:
    async with translate_errors(target):
        return await awaitable


class Channels:
    """Channels opened on demand with one message limit and TLS, closed together at shutdown.

    With TLS the files are read here (a broken one stops the start, naming its setting)
    and looked at again at most every ``tls.reload_s`` by a call; once they changed, that
    call and the later ones go over a new channel with the new files (`RotatingChannel`).
    """

    def __init__(self, max_message_bytes: int, tls: ClientTlsSettings | None = None) -> None:
        _LIVE.add(self)
        self._limit = max_message_bytes
        self._open: list[grpc.aio.Channel] = []
        self._server_name = tls.server_name if tls is not None else ""
        self._credentials: Reloading[grpc.ChannelCredentials] | None = None
        if tls is not None and tls.on:
            self._credentials = reloading_channel_credentials(tls)

    def open(self, target: str) -> grpc.aio.Channel:
        channel: grpc.aio.Channel
        if self._credentials is None:
            channel = open_channel(target, max_message_bytes=self._limit)
        else:
            channel = RotatingChannel(
                lambda creds: open_channel(target, self._limit, creds, self._server_name),
                self._credentials,
            )
        self._open.append(channel)
        return channel

    def __len__(self) -> int:
        return len(self._open)

    async def close(self) -> None:
        open_, self._open = self._open, []
        for channel in open_:
            await channel.close()


_LIVE: weakref.WeakSet[Channels] = weakref.WeakSet()


def open_channels() -> int:
    """Channels every `Channels` of this process holds open (``engram.grpc.channels.open``)."""
    return sum(len(channels) for channels in list(_LIVE))
