"""Paging helpers for embedded stores that cannot seek to a cursor cheaply."""

from __future__ import annotations

import threading
from collections import OrderedDict


class ScanRests:
    """The ids that follow each scan page served, by (tenant, cursor), for the next call
    with that cursor: a scan then walks its tenant once, not once per page. Bounded in
    scans and in ids held; what is evicted is walked again when its cursor comes."""

    def __init__(self, scans: int = 8, ids: int = 1_000_000) -> None:
        self._rests: OrderedDict[tuple[str, str], list[str]] = OrderedDict()
        self._scans = scans
        self._ids = ids
        self._lock = threading.Lock()  # scans run on worker threads

    def take(self, tenant: str, cursor: str) -> list[str] | None:
        with self._lock:
            return self._rests.pop((tenant, cursor), None)

    def keep(self, tenant: str, cursor: str, rest: list[str]) -> None:
        if len(rest) > self._ids:
            return  # a tenant this large walks on every page
        with self._lock:
            self._rests[(tenant, cursor)] = rest
            while len(self._rests) > self._scans or (
                sum(map(len, self._rests.values())) > self._ids
            ):
                self._rests.popitem(last=False)
