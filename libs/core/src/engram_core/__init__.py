"""Engram's domain: types, errors, ports and pure logic. No I/O."""
