"""Identifiers: memories get UUIDv7 (time-ordered) unless the client brings a UUID."""

from __future__ import annotations

import uuid

import uuid6


def new_id() -> str:
    return str(uuid6.uuid7())


def normalise_id(value: str) -> str | None:
    """The canonical form of a UUID string, or None when it is not one."""
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return None


# The tenant token of maintenance runs over every tenant (rebuilds) in KV keys and lease
# names: never a tenant, since tenants match [A-Za-z0-9_-].
EVERY_TENANT = "=all"
