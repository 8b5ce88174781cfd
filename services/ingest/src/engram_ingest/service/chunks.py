"""Store writes cut to fit a gRPC message.

A tenant's memories of a batch go to each store in one write, unless together they would
not fit in one request: the stores (and the client) refuse a message larger than
``max_message_bytes`` with RESOURCE_EXHAUSTED, which is retried, so an oversized write
would never pass. Each memory the gateway accepts fits on its own (``engram_core.limits``);
a batch of large ones is cut into writes of at most ``budget`` estimated bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

from engram_core.model import Entity, Memory

# A metadata value takes more room as a protobuf Struct than as JSON: "0," is two bytes of
# JSON and about eleven of Struct (a Value wrapping a double, in a list).
STRUCT_PER_JSON_BYTE = 6
OVERHEAD_BYTES = 1024  # timestamps, numbers, field tags

# An enriched memory ready for the stores: with its entities (graph) and vector (vector).
Ready = tuple[Memory, list[Entity], list[float]]


def request_bytes(memory: Memory, entities: Sequence[Entity], vector: Sequence[float]) -> int:
    """An upper estimate of what a memory adds to the largest of its store writes."""
    texts = (
        memory.id,
        memory.content,
        memory.type,
        *memory.tags,
        *memory.tag_prefixes,
        *memory.entities,
        *(e.name + e.slug + e.kind for e in entities),
    )
    metadata = len(json.dumps(memory.metadata, ensure_ascii=False).encode())
    return (
        sum(len(t.encode()) + 4 for t in texts)
        + STRUCT_PER_JSON_BYTE * metadata
        + 4 * len(vector)
        + OVERHEAD_BYTES
    )


def chunks(items: Sequence[Ready], budget: int) -> Iterator[list[Ready]]:
    """``items`` in order, cut into runs of at most ``budget`` estimated bytes (a memory
    larger than that alone in its run)."""
    run: list[Ready] = []
    used = 0
    for item in items:
        size = request_bytes(*item)
        if run and used + size > budget:
            yield run
            run, used = [], 0
        run.append(item)
        used += size
    if run:
        yield run
