"""A value read from files and read again when they change, without a restart.

Certificates, keys and token files are rotated in place (a Kubernetes Secret swaps a
symlink, cert-manager renews, an operator edits): a holder of a `Reloading` sees the new
value at its next look once the files' stamp (modification time, size, inode) moved.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Generic, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")
Stamp = tuple[tuple[int, int, int, int], ...]


def stamp(paths: Sequence[Path]) -> Stamp:
    """What changes when a file is written or replaced; a missing file counts as a state."""
    out = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            out.append((-1, -1, -1, -1))
        else:
            out.append((st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino))
    return tuple(out)


class Reloading(Generic[T]):
    """``load()``'s value, loaded again when ``paths`` change, looked at at most every
    ``interval_s`` (0: every `get`). The first load happens here, so a broken file stops
    the start; a later one that fails (a half-written file, a key that no longer matches
    its certificate) is logged and the last good value kept until the files change again.
    Thread-safe: gRPC calls a server's certificate fetcher from its own threads."""

    def __init__(
        self,
        paths: Sequence[Path],
        load: Callable[[], T],
        interval_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._paths = tuple(paths)
        self._load = load
        self._interval = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._stamp = stamp(self._paths)
        self._value = load()
        self._next = clock() + interval_s

    def get(self) -> T:
        with self._lock:
            now = self._clock()
            if now < self._next:
                return self._value
            self._next = now + self._interval
            current = stamp(self._paths)
            if current == self._stamp:
                return self._value
            # The stamp is taken before the read: a write during it shows at the next look.
            self._stamp = current
            try:
                self._value = self._load()
            except (OSError, ValueError) as err:
                log.error("kept the previous %s: %s", ", ".join(map(str, self._paths)), err)
            else:
                log.info("reloaded %s", ", ".join(map(str, self._paths)))
            return self._value
