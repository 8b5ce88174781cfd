"""Checkpoints in a NATS KV bucket: one key per (tenant, pass, dry run), the value a
``ConsolidationRun`` proto, every write a compare-and-set on the key's revision."""

from __future__ import annotations

import dataclasses

from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import (
    BucketNotFoundError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NoKeysError,
)
from nats.js.kv import KeyValue

from engram_consolidate.mapping import key_from_name, key_name, record_from_bytes, record_to_bytes
from engram_consolidate.service import FenceLost, Key, RunRecord
from engram_core.errors import Unavailable
from engram_platform.jetstream import CONSOLIDATE_BUCKET, setting_up

BUCKET = CONSOLIDATE_BUCKET  # shared with the gateway, which reads the status


async def open_bucket(js: JetStreamContext, replicas: int) -> KeyValue:
    """The bucket, created on first use (history 1: only the latest record counts); an
    existing one is brought to `replicas` like the streams (its records stay)."""
    try:
        kv = await js.key_value(BUCKET)
    except BucketNotFoundError:
        config = KeyValueConfig(
            bucket=BUCKET,
            description="consolidation runs and checkpoints (engram-consolidate)",
            history=1,
            replicas=replicas,
            storage=StorageType.FILE,
        )
        with setting_up(f"bucket {BUCKET}", replicas):
            return await js.create_key_value(config)
    stream = (await js.stream_info(f"KV_{BUCKET}")).config
    if stream.num_replicas != replicas:
        with setting_up(f"stream {stream.name}", replicas):  # it exists: update, no re-read
            await js.update_stream(dataclasses.replace(stream, num_replicas=replicas))
    return kv


async def read_entry(kv: KeyValue, name: str) -> tuple[bytes, int] | None:
    """The value of ``name`` and its revision (None: no such key)."""
    try:
        entry = await kv.get(name)
    except KeyNotFoundError:
        return None
    except Exception as exc:
        raise Unavailable(f"checkpoint read of {name} failed: {exc}") from exc
    return entry.value or b"", int(entry.revision or 0)


async def write_entry(kv: KeyValue, name: str, data: bytes, revision: int | None) -> int:
    """Compare-and-set on ``revision`` (None: the key must not exist yet); FenceLost when
    another writer moved it. The new revision."""
    try:
        if revision is None:
            return int(await kv.create(name, data))
        return int(await kv.update(name, data, last=revision))
    except KeyWrongLastSequenceError as exc:
        raise FenceLost(f"{name}: revision moved past {revision}") from exc
    except Exception as exc:
        raise Unavailable(f"checkpoint write of {name} failed: {exc}") from exc


class KvCheckpoints:
    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv

    async def get(self, key: Key) -> tuple[RunRecord, int] | None:
        got = await read_entry(self._kv, key_name(key))
        return None if got is None else (record_from_bytes(key, got[0]), got[1])

    async def put(self, record: RunRecord, revision: int | None) -> int:
        return await write_entry(self._kv, key_name(record.key), record_to_bytes(record), revision)

    async def keys(self) -> set[Key]:
        try:
            names = await self._kv.keys()
        except NoKeysError:
            return set()
        except Exception as exc:
            raise Unavailable(f"cannot list checkpoints: {exc}") from exc
        return {k for n in names if (k := key_from_name(n)) is not None}
