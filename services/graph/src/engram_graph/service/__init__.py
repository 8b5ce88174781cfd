"""Pure logic of the graph service, over the engram_core GraphStore port."""

from engram_graph.service.graph import GraphService, Limits

__all__ = ["GraphService", "Limits"]
