"""The one set of limits a memory keeps from the gateway to every store.

The gateway validates against these, enrichment stays inside them and each store's request
checks enforce them, so a memory the gateway accepts is one every store accepts: a store
refusing it would leave an event that can never be applied.

- Tags: at most ``MAX_TAGS`` per memory, each at most ``MAX_TAG_LENGTH`` characters, the
  entity tags enrichment adds included. Enrichment adds at most ``MAX_ENTITY_TAGS`` of them,
  and never more than the room the client's own tags leave (``entity_tag_room``).
- Metadata (and relation properties) nest at most ``MAX_METADATA_DEPTH`` objects or lists
  deep. Every level of a ``google.protobuf.Struct`` costs up to three protobuf message levels,
  and the deepest store request (vector's and graph's upserts) wraps the Struct three more
  levels down; protobuf refuses to decode beyond 100. The limit keeps a wide margin below that.
- Content and metadata sizes are gateway settings; they may not exceed
  ``MAX_CONTENT_BYTES`` and ``MAX_METADATA_BYTES``, so one memory always fits well inside a
  store request (gRPC's message size).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

MAX_TAGS = 64
MAX_TAG_LENGTH = 128
MAX_ENTITY_TAGS = 32
MAX_METADATA_DEPTH = 20
MAX_CONTENT_BYTES = 256 * 1024
MAX_METADATA_BYTES = 256 * 1024


def entity_tag_room(client_tags: int) -> int:
    """How many entity tags enrichment may add to a memory carrying ``client_tags`` tags."""
    return max(0, min(MAX_ENTITY_TAGS, MAX_TAGS - client_tags))


def nesting_depth(value: Any, cap: int = MAX_METADATA_DEPTH + 1) -> int:
    """Objects and lists on the deepest path of a JSON value: 0 for a scalar, 1 for ``{}``.

    Counted up to ``cap``: anything deeper counts as ``cap``, so the walk stays short (and
    ends) whatever the client sent. No recursion, for the same reason.
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack and deepest < cap:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Sequence[Any] = list(item.values())
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        deepest = max(deepest, depth + 1)
        stack.extend((child, depth + 1) for child in children)
    return deepest
