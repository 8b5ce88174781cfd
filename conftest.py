"""Fixtures from engram_testing offered to every test suite."""

pytest_plugins = ("engram_testing.metrics",)
