"""A value's canonical text: the same for equal values in every process.

The recall cache key is computed from it, so it never goes through ``hash()`` (salted per
process) or the iteration order of a set, and a type it does not know is an error rather
than a ``repr`` that might leave something out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from datetime import datetime
from enum import Enum
from typing import Any

# A field whose metadata has this set to False is left out of the canonical form.
KEYED = "keyed"


def canonical(value: Any) -> str:
    """``value`` as compact JSON with sorted keys (see ``tree``)."""
    return json.dumps(tree(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def tree(value: Any) -> Any:
    """``value`` as plain JSON data: a dataclass becomes its type's name and every field
    (``init=False`` ones too, unless marked ``keyed=False``), an enum its type and value."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Enum):
        return [type(value).__name__, tree(value.value)]
    if isinstance(value, datetime):
        return value.isoformat()
    if is_dataclass(value) and not isinstance(value, type):
        out = {f.name: tree(getattr(value, f.name)) for f in fields(value) if _keyed(f.metadata)}
        return {"type": type(value).__name__, "fields": out}
    if isinstance(value, list | tuple):
        return [tree(v) for v in value]
    if isinstance(value, frozenset | set):
        return sorted((tree(v) for v in value), key=canonical)
    if isinstance(value, Mapping):
        return sorted(([tree(k), tree(v)] for k, v in value.items()), key=canonical)
    raise TypeError(f"no canonical form for {type(value).__name__}")


def _keyed(metadata: Mapping[str, Any]) -> bool:
    return bool(metadata.get(KEYED, True))
