"""Timestamp helpers shared by the proto mapping and the services."""

from __future__ import annotations

from datetime import UTC, datetime


def from_epoch_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def to_epoch_ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


def parse_iso(value: str) -> datetime:
    """ISO-8601 to an aware UTC datetime; naive input is taken as UTC. Raises ValueError."""
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    dt = datetime.fromisoformat(text)
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)
