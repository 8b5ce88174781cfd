"""Implementations of engram_core.ports.TextIndex."""
