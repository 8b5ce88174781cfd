"""Compact text for the model to read; the structured content carries every field."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def memory_line(m: dict[str, Any]) -> str:
    tags = f" [{', '.join(m['tags'])}]" if m["tags"] else ""
    when = f" {m['timestamp'][:10]}" if m["timestamp"] else ""
    return f"{m['id']} ({m['type']}{when}){tags}: {m['content']}"


def recall_text(results: Sequence[dict[str, Any]], context: str) -> str:
    if not results:
        return "No memories matched."
    if context:
        # The packed context has no ids, and a model acts on a memory by its id.
        ids = ", ".join(r["memory"]["id"] for r in results)
        return f"{context}\n(ids, best first: {ids})"
    return "\n".join(f"{r['score']:.2f} {memory_line(r['memory'])}" for r in results)


def related_text(related: Sequence[dict[str, Any]]) -> str:
    if not related:
        return "No related memories."
    return "\n".join(
        f"{r['type']} (depth {r['depth']}, strength {r['strength']}) {memory_line(r['memory'])}"
        for r in related
    )


def as_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
