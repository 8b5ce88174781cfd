"""Typed async clients of the internal services, shared by the gateway and the workers.

Each takes and returns domain types and raises catalog errors, never AioRpcError. Beside
them, `engram` (cli.py, cli_commands.py, transfer.py), the command line for the public API,
which goes through the SDK (engram_client) instead.
"""
