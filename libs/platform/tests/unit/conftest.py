"""The in-memory metric reader behind the global meter provider (`engram_testing.metrics`)."""

from engram_testing.metrics import metric_reader

__all__ = ["metric_reader"]
