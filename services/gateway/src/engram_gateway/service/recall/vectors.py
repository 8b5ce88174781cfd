"""How a recall asks the vector store: by the client's own embedding, or by text."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from engram_core.errors import InvalidArgument


def query_of(dense: str, vector: Sequence[float]) -> dict[str, Any]:
    """The client's own embedding when it gave one, else the text to embed."""
    return {"vector": vector} if vector else {"query": dense}


@contextmanager
def embedding_named(vector: Sequence[float]) -> Iterator[None]:
    """A client's own embedding is refused by its size, which only the vector service
    knows: name the request's field. Any other refusal stays as it is."""
    try:
        yield
    except InvalidArgument as exc:
        if vector:
            raise InvalidArgument("embedding", exc.reason) from exc
        raise
