"""Engram's Python SDK."""
