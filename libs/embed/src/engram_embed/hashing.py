"""A deterministic bag-of-words embedder, for unit tests only.

Texts sharing words get similar vectors, which is enough to test ranking
plumbing without the real model; it knows nothing of meaning.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence

_WORD = re.compile(r"\w+")


class HashingEmbedder:
    def __init__(self, dimension: int = 384) -> None:
        if dimension < 2:
            raise ValueError("dimension must be at least 2")
        self._dimension = dimension

    @property
    def model_name(self) -> str:
        return f"hashing-{self._dimension}"

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def query_instruction(self) -> str:
        return ""

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.embed_one(t) for t in texts]

    def embed_one(self, text: str) -> list[float]:
        vec = [0.0] * self._dimension
        # A text without words still needs a unit vector: it hashes to one slot.
        for token in _WORD.findall(text.lower()) or [""]:
            # blake2b, not hash(): Python's str hash changes with every process.
            h = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "big")
            # A signed bucket keeps collisions from always adding up.
            vec[(h >> 1) % self._dimension] += 1.0 if h & 1 else -1.0
        norm = math.sqrt(sum(x * x for x in vec))
        if norm == 0.0:  # every word cancelled out
            vec[0], norm = 1.0, 1.0
        return [x / norm for x in vec]
