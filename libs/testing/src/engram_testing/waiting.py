"""Waiting in tests for something another task does (a consumer acking, a worker settling)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


async def until(
    check: Callable[[], bool | Awaitable[bool]],
    timeout_s: float = 15.0,
    interval_s: float = 0.02,
) -> None:
    """Poll ``check`` (plain or async) every ``interval_s`` until it holds; TimeoutError
    after ``timeout_s``."""
    async with asyncio.timeout(timeout_s):
        while True:
            ok = check()
            if ok if isinstance(ok, bool) else await ok:
                return
            await asyncio.sleep(interval_s)
