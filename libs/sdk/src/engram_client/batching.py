"""store_many's plan: cut any iterable into StoreBatch calls, each item under its own
idempotency key, and resend only the items whose failure may pass on a retry."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from engram.common.v1 import common_pb2
from engram_client import convert
from engram_client.types import Batch, Stored

MAX_BATCH = 1000  # the gateway's StoreBatch limit
# Item failures that may pass on a retry under the same key (the log may hold the item:
# the key makes the retry answer it as a duplicate instead of storing it twice).
RETRY_ITEM_CODES = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED"})

# An item: its content, or a dict of MemoryInput fields with "content" (and optionally
# "idempotency_key", e.g. a row id, so a re-run of the same import adds nothing twice).
Item = str | Mapping[str, Any]


@dataclass(frozen=True)
class Progress:
    done: int  # items finished (stored or failed for good) so far
    stored: int
    failed: int


@dataclass
class StoreManyResult:
    results: list[Stored] = field(default_factory=list)  # per item, in input order
    sequence: int = 0

    @property
    def stored(self) -> int:
        return sum(1 for r in self.results if r.ok)

    @property
    def failed(self) -> list[Stored]:
        return [r for r in self.results if not r.ok]

    def progress(self) -> Progress:
        stored = self.stored
        return Progress(len(self.results), stored, len(self.results) - stored)


@dataclass
class Chunk:
    inputs: list[common_pb2.MemoryInput]
    keys: list[str]
    results: list[Stored | None]

    def pending(self) -> list[int]:
        """Items to send (again): never answered, or failed in a way a retry may fix."""
        return [i for i, r in enumerate(self.results) if r is None or r.code in RETRY_ITEM_CODES]

    def take(self, indices: list[int], batch: Batch) -> None:
        for i, result in zip(indices, batch.results, strict=True):
            self.results[i] = result

    def done(self) -> list[Stored]:
        return [r or Stored("", 0, False, "UNAVAILABLE", "not sent") for r in self.results]


def chunks(items: Iterable[Item], batch_size: int) -> Iterator[Chunk]:
    if not 1 <= batch_size <= MAX_BATCH:
        raise ValueError(f"batch_size must be in 1..{MAX_BATCH}")
    return _chunks(items, batch_size)


def _chunks(items: Iterable[Item], batch_size: int) -> Iterator[Chunk]:
    it = iter(items)
    while batch := list(itertools.islice(it, batch_size)):
        inputs, keys = zip(*(_item(x) for x in batch), strict=True)
        yield Chunk(list(inputs), list(keys), [None] * len(batch))


def one_chunk(items: Iterable[Item]) -> Chunk:
    """The items of one StoreBatch call (1..1000)."""
    found = list(_chunks(items, MAX_BATCH + 1))
    if len(found) != 1 or len(found[0].inputs) > MAX_BATCH:
        raise ValueError(f"a batch holds 1..{MAX_BATCH} items; store_many takes any number")
    return found[0]


def _item(item: Item) -> tuple[common_pb2.MemoryInput, str]:
    if isinstance(item, str):
        return convert.memory_input(item), new_key()
    fields = dict(item)
    key = str(fields.pop("idempotency_key", "") or new_key())
    return convert.memory_input(fields.pop("content"), **fields), key


def new_key() -> str:
    return uuid.uuid4().hex


ProgressCallback = Callable[[Progress], None]
