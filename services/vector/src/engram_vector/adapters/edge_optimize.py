"""Child process that builds HNSW for a copied Edge shard: ``python -m ... <shard dir>``.

`EdgeShard.optimize()` holds the GIL for its whole run, so it runs here rather than
in the serving process. Prints ``changed`` or ``unchanged`` as its last line.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

import qdrant_edge as qe

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """A rebuild whose service is gone is useless: its copy is removed on the next open."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:  # the parent died before prctl took effect
        sys.exit(1)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m engram_vector.adapters.edge_optimize SHARD_DIR", file=sys.stderr)
        return 2
    _die_with_parent()
    shard = qe.EdgeShard.load(argv[0])
    try:
        changed = shard.optimize()
        shard.flush()
    finally:
        shard.close()
    print("changed" if changed else "unchanged")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
