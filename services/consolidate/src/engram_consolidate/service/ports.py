"""The slices of the store ports access tracking needs. engram_clients satisfy them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from engram_core.model import AccessUpdate, Memory


class AccessWriter(Protocol):
    async def update_access(self, tenant: str, updates: Sequence[AccessUpdate]) -> int: ...


class AccessStore(AccessWriter, Protocol):
    """The store whose access_count is read back: vector holds every memory's payload."""

    async def get(self, tenant: str, ids: Sequence[str]) -> list[Memory]: ...
