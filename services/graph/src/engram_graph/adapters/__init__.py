"""Implementations of `engram_core.ports.GraphStore`: ladybug in-process, Neo4j server."""
