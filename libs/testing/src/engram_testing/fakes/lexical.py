"""An in-memory `TextIndex` for unit tests: BM25 over crude word stems, same filter semantics."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from engram_core.access import apply_access, keep_access
from engram_core.errors import EngramError
from engram_core.filters import matches
from engram_core.model import AccessUpdate, Filter, Hit, Memory, UpsertResult

_WORD = re.compile(r"[^\W_]+")
_K1 = 1.2
_B = 0.75


def _stem(word: str) -> str:
    """A few English suffix rules: enough for "running" ~ "runs", not a real stemmer."""
    for suffix in ("ing", "ed", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            if word[-1] == word[-2] and word[-1] not in "lsz":
                word = word[:-1]
            break
    return word[:-1] if len(word) > 4 and word.endswith("e") else word


def tokens(text: str) -> list[str]:
    return [_stem(w) for w in _WORD.findall(text.lower()) if len(w) <= 40]


@dataclass(frozen=True, slots=True)
class _Entry:
    version: int
    memory: Memory | None  # None: a tombstone


class FakeTextIndex:
    """Holds everything in dicts. Set ``failure`` to make every call raise it (a backend down)."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], _Entry] = {}
        self.failure: EngramError | None = None

    def _check(self) -> None:
        if self.failure is not None:
            raise self.failure

    def _live(self, tenant: str, id_: str) -> Memory | None:
        entry = self._entries.get((tenant, id_))
        return None if entry is None else entry.memory

    async def upsert(self, tenant: str, memories: Sequence[Memory]) -> UpsertResult:
        self._check()
        newest: dict[str, Memory] = {}
        for m in memories:
            if m.id not in newest or m.version > newest[m.id].version:
                newest[m.id] = m
        applied = 0
        for m in newest.values():
            entry = self._entries.get((tenant, m.id))
            if entry is not None and m.version <= entry.version:
                continue
            fresh = replace(m, tenant=tenant)
            if entry is not None and entry.memory is not None:
                fresh = keep_access(fresh, entry.memory)
            self._entries[(tenant, m.id)] = _Entry(m.version, fresh)
            applied += 1
        return UpsertResult(applied=applied, skipped=len(memories) - applied)

    async def delete(self, tenant: str, ids: Sequence[str], version: int) -> int:
        self._check()
        deleted = 0
        for id_ in dict.fromkeys(ids):
            entry = self._entries.get((tenant, id_))
            if entry is not None and version <= entry.version:
                continue
            if entry is not None and entry.memory is not None:
                deleted += 1
            self._entries[(tenant, id_)] = _Entry(version, None)
        return deleted

    async def search(self, tenant: str, query: str, flt: Filter, limit: int) -> list[Hit]:
        self._check()
        terms = set(tokens(query))
        docs = [
            (e.memory, Counter(tokens(e.memory.content + " " + " ".join(e.memory.tags))))
            for (t, _), e in self._entries.items()
            if t == tenant and e.memory is not None
        ]
        if not terms or not docs or limit <= 0:
            return []
        avg_len = sum(sum(tf.values()) for _, tf in docs) / len(docs) or 1.0
        df = Counter(term for _, tf in docs for term in terms if term in tf)
        hits: list[Hit] = []
        for m, tf in docs:
            if not matches(m, flt):
                continue
            length = sum(tf.values())
            score = 0.0
            for term in terms & tf.keys():
                idf = math.log(1 + (len(docs) - df[term] + 0.5) / (df[term] + 0.5))
                norm = tf[term] + _K1 * (1 - _B + _B * length / avg_len)
                score += idf * tf[term] * (_K1 + 1) / norm
            if score > 0:
                hits.append(Hit(id=m.id, score=score, memory=m))
        hits.sort(key=lambda h: (-h.score, h.id))
        return hits[:limit]

    async def get(self, tenant: str, ids: Sequence[str]) -> list[Memory]:
        self._check()
        found = (self._live(tenant, i) for i in dict.fromkeys(ids))
        return [m for m in found if m is not None]

    async def update_access(self, tenant: str, updates: Sequence[AccessUpdate]) -> int:
        self._check()
        updated = 0
        for u in updates:
            m = self._live(tenant, u.id)
            if m is None or (changed := apply_access(m, u)) is None:
                continue
            self._entries[(tenant, u.id)] = _Entry(m.version, changed)
            updated += 1
        return updated

    async def count(self, tenant: str) -> int:
        self._check()
        return sum(1 for (t, _), e in self._entries.items() if t == tenant and e.memory is not None)

    async def close(self) -> None:
        return None
