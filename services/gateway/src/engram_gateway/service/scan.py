"""Paging through a store's memories for the recall step no index query serves (trending).
Cost: one Scan RPC per ``page`` memories, O(memories) per call."""

from __future__ import annotations

from typing import Protocol

from engram_core.model import Memory, ScanPage

DEFAULT_PAGE = 500  # the stores accept up to 1000 a page


class ScanPort(Protocol):
    async def scan(
        self, tenant: str, cursor: str | None, limit: int, timeout: float | None = None
    ) -> ScanPage: ...


async def scan_memories(
    port: ScanPort, tenant: str, most: int, timeout: float, page: int = DEFAULT_PAGE
) -> tuple[list[Memory], bool]:
    """Up to ``most`` live memories of the tenant (archived included) in the store's key
    order, and whether more were left unread."""
    out: list[Memory] = []
    cursor: str | None = None
    while len(out) < most:
        got = await port.scan(tenant, cursor, min(page, most - len(out)), timeout=timeout)
        out.extend(got.memories)
        cursor = got.next_cursor
        if cursor is None:
            return out, False
    return out, True
