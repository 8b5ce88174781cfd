"""A channel that follows rotated client credentials.

gRPC fixes a channel's TLS credentials when it is made, and clients keep their stubs for
the life of the process, so the channel a stub holds switches underneath: the first call
after the certificate or CA files changed opens a new channel with them; calls already
running finish on the old one, which is closed after a grace period.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import TracebackType
from typing import Any

import grpc

from engram_platform.reloading import Reloading

Opener = Callable[[grpc.ChannelCredentials], grpc.aio.Channel]


class RotatingChannel(grpc.aio.Channel):
    def __init__(
        self,
        open_: Opener,
        credentials: Reloading[grpc.ChannelCredentials],
        grace_s: float = 30.0,
    ) -> None:
        self._open = open_
        self._source = credentials
        self._grace = grace_s
        self._credentials = credentials.get()
        self._channel = open_(self._credentials)
        self._retiring: set[asyncio.Task[None]] = set()

    def current(self) -> grpc.aio.Channel:
        """The channel over the current credentials; call it on the event loop."""
        credentials = self._source.get()
        if credentials is not self._credentials:
            old = self._channel
            self._credentials, self._channel = credentials, self._open(credentials)
            task = asyncio.get_running_loop().create_task(old.close(self._grace))
            self._retiring.add(task)
            task.add_done_callback(self._retiring.discard)
        return self._channel

    def unary_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return _Switching(self, "unary_unary", method, args, kwargs)

    def unary_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return _Switching(self, "unary_stream", method, args, kwargs)

    def stream_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return _Switching(self, "stream_unary", method, args, kwargs)

    def stream_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return _Switching(self, "stream_stream", method, args, kwargs)

    def get_state(self, try_to_connect: bool = False) -> grpc.ChannelConnectivity:
        return self._channel.get_state(try_to_connect)

    async def wait_for_state_change(self, last_observed_state: grpc.ChannelConnectivity) -> None:
        await self._channel.wait_for_state_change(last_observed_state)

    async def channel_ready(self) -> None:
        await self.current().channel_ready()

    async def close(self, grace: float | None = None) -> None:
        await self._channel.close(grace)
        for task in list(self._retiring):
            await task

    async def __aenter__(self) -> RotatingChannel:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.close(None)


class _Switching:
    """A stub's multicallable: each call goes to the channel current at that moment."""

    def __init__(
        self,
        owner: RotatingChannel,
        kind: str,
        method: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        self._owner = owner
        self._kind = kind
        self._method = method
        self._args = args
        self._kwargs = kwargs
        self._bound: tuple[grpc.aio.Channel, Any] | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        channel = self._owner.current()
        if self._bound is None or self._bound[0] is not channel:
            make = getattr(channel, self._kind)
            self._bound = (channel, make(self._method, *self._args, **self._kwargs))
        return self._bound[1](*args, **kwargs)
