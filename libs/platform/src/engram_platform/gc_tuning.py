"""The garbage collector set for a long-running server.

Serving allocates thousands of short-lived containers per request (messages, dataclasses,
dicts). At CPython's defaults a young collection runs every 700 net allocations, and every
hundredth may be a full one that walks every object the process holds: its modules, the
protobuf descriptors, the conversion memos. Under load that is many full walks a second,
mostly over objects that live as long as the process. So, once a server has started, what it holds
then is frozen out of the collector's sight, and the youngest generation is collected
every ``GEN0_THRESHOLD`` allocations: most request objects are freed by their reference
counts before a collection sees them, so fewer are promoted and walked again. Only cyclic
garbage waits longer for its collection.
"""

from __future__ import annotations

import gc

GEN0_THRESHOLD = 20_000


def tune_for_serving() -> None:
    """Freeze what the process holds now and collect the youngest generation less often.
    Call it once, after start-up."""
    gc.collect()  # what start-up left as garbage is not frozen with the rest
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, gen1, gen2)
