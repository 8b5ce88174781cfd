"""One recall's relations, asked of the graph once per memory.

A hybrid recall needs the edges of its candidates three times: the relation
component (top candidates), the graph rerank of ``hybrid_graph`` and the state
step (the ranked ones, then their supersession chains). The ranked memories are
mostly candidates already asked about, so each later step asks the graph only
for the ids it has not seen. ``Relations`` returns every edge touching any id,
so an id's edges are known once it has been asked, even when it has none.

A memo reads the edges of one ``origin`` ("" every edge): a recall that needs only what
agents made (the relation component without system edges, the state step: supersession
edges are agents' own) asks for those, which the graph answers without a lookup for a
tenant that has none.
"""

from __future__ import annotations

from collections.abc import Sequence

from engram_core.model import Relation
from engram_gateway.service.ports import GraphPort


class RelationMemo:
    def __init__(self, graph: GraphPort, tenant: str, origin: str = "") -> None:
        self._graph = graph
        self._tenant = tenant
        self._origin = origin
        self._asked: set[str] = set()
        self._edges: dict[tuple[str, str, str], Relation] = {}
        self.calls = 0

    @property
    def tenant(self) -> str:
        return self._tenant

    async def relations(self, ids: Sequence[str], timeout: float) -> list[Relation]:
        """Every relation touching any of ``ids``, each once, as the graph port gives them."""
        missing = [i for i in dict.fromkeys(ids) if i not in self._asked]
        if missing:
            got = await self._graph.relations(
                self._tenant, missing, origin=self._origin, timeout=timeout
            )
            self.calls += 1
            for r in got:
                self._edges.setdefault((r.source_id, r.type, r.target_id), r)
            self._asked.update(missing)
        wanted = set(ids)
        return [r for r in self._edges.values() if r.source_id in wanted or r.target_id in wanted]
