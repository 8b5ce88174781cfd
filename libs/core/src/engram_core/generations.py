"""The rules of store generations every adapter shares (no I/O): names, the live pointer,
what may be swapped or dropped. Adapters keep a `Registry` (in a file beside their data
directories, or read back from the server's aliases) and apply its answers to the backend.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from engram_core.errors import FailedPrecondition, InvalidArgument, NotFound
from engram_core.model import Generation

FIRST = "v1"
NAME = re.compile(r"^v([1-9][0-9]{0,8})$")


def number(name: str) -> int:
    """The number of a generation name ("v12" → 12); 0 for anything else."""
    found = NAME.match(name)
    return int(found.group(1)) if found else 0


def check_generation_name(name: str, field: str = "name") -> str:
    """A name a caller gave to swap or drop: present; whether it exists is the store's answer
    (NotFound)."""
    if not name.strip():
        raise InvalidArgument(field, "must name a generation")
    return name


@dataclass(frozen=True, slots=True)
class GenerationRecord:
    """What a store keeps about one generation. ``dimension`` is 0 where there are no vectors."""

    name: str
    embedding_model: str
    dimension: int
    created_at: datetime

    def public(self, *, live: bool, count: int) -> Generation:
        return Generation(
            name=self.name,
            live=live,
            embedding_model=self.embedding_model,
            count=count,
            created_at=self.created_at,
            dimension=self.dimension,
        )


@dataclass(frozen=True, slots=True)
class Registry:
    """Every generation of a store (oldest first) and which one is live."""

    live: str
    records: tuple[GenerationRecord, ...]

    @classmethod
    def initial(cls, record: GenerationRecord) -> Registry:
        return cls(live=record.name, records=(record,))

    def find(self, name: str) -> GenerationRecord | None:
        return next((r for r in self.records if r.name == name), None)

    def get(self, name: str) -> GenerationRecord:
        """The record of ``name`` ("" = the live one); unknown → NotFound naming it."""
        record = self.find(name or self.live)
        if record is None:
            raise NotFound(f"generation {name!r} does not exist")
        return record

    @property
    def live_record(self) -> GenerationRecord:
        return self.get(self.live)

    def next_name(self) -> str:
        return f"v{max((number(r.name) for r in self.records), default=0) + 1}"

    def created(
        self, embedding_model: str, dimension: int, now: datetime
    ) -> tuple[Registry, GenerationRecord]:
        record = GenerationRecord(self.next_name(), embedding_model, dimension, now)
        return replace(self, records=(*self.records, record)), record

    def named(self, name: str) -> GenerationRecord:
        """The record of exactly ``name``; unknown (or "") → NotFound."""
        record = self.find(name)
        if record is None:
            raise NotFound(f"generation {name!r} does not exist")
        return record

    def swapped(self, name: str) -> Registry:
        """``name`` made live; NotFound when there is no such generation."""
        return replace(self, live=self.named(name).name)

    def dropped(self, name: str) -> Registry:
        """Without ``name``; NotFound when unknown, FailedPrecondition when it is live."""
        if self.named(name).name == self.live:
            raise FailedPrecondition("name", f"generation {name} is live; swap another in first")
        return replace(self, records=tuple(r for r in self.records if r.name != name))

    def to_json(self) -> str:
        return json.dumps(
            {
                "live": self.live,
                "generations": [
                    {
                        "name": r.name,
                        "embedding_model": r.embedding_model,
                        "dimension": r.dimension,
                        "created_at": r.created_at.isoformat(),
                    }
                    for r in self.records
                ],
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> Registry:
        raw: dict[str, Any] = json.loads(text)
        records = tuple(
            GenerationRecord(
                name=str(g["name"]),
                embedding_model=str(g["embedding_model"]),
                dimension=int(g["dimension"]),
                created_at=datetime.fromisoformat(g["created_at"]),
            )
            for g in raw["generations"]
        )
        registry = cls(live=str(raw["live"]), records=records)
        registry.live_record  # noqa: B018 - a file naming no live record is corrupt: fail here
        return registry
