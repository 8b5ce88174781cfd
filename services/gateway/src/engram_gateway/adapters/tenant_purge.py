"""What JetStream keeps of a tenant outside the memory stream, purged when it is deleted:
its dead letters, and its consolidation run records in the worker's KV bucket."""

from __future__ import annotations

from nats.js import JetStreamContext
from nats.js.errors import BucketNotFoundError
from nats.js.kv import KeyValue

from engram_core.errors import Unavailable
from engram_platform import jetstream as jsm

# The worker's records of a tenant: run.<tenant>.<pass> and dry.<tenant>.<pass>.
RECORD_KINDS = ("run", "dry")


class NatsTenantPurge:
    def __init__(self, js: JetStreamContext) -> None:
        self._js = js

    async def purge(self, tenant: str) -> None:
        try:
            await self._js.purge_stream(
                jsm.STREAM_DEADLETTER, subject=jsm.subject(tenant, jsm.DEAD_LETTER)
            )
            await self._purge_records(tenant)
        except Exception as exc:
            raise Unavailable(f"cannot purge what the log keeps of {tenant}: {exc!r}") from exc

    async def _purge_records(self, tenant: str) -> None:
        try:
            kv = await self._js.key_value(jsm.CONSOLIDATE_BUCKET)
        except BucketNotFoundError:
            return  # no worker has recorded anything yet
        for kind in RECORD_KINDS:
            for key in await _keys(kv, f"{kind}.{tenant}.*"):
                await kv.purge(key)


async def _keys(kv: KeyValue, pattern: str) -> list[str]:
    """The live keys matching a subject pattern (KeyValue.keys filters by substring)."""
    watcher = await kv.watch(pattern, ignore_deletes=True, meta_only=True)
    keys: list[str] = []
    try:
        async for entry in watcher:
            if entry is None:  # the end of what the bucket holds
                break
            keys.append(entry.key)
    finally:
        await watcher.stop()  # type: ignore[no-untyped-call]  # nats-py leaves it untyped
    return keys
