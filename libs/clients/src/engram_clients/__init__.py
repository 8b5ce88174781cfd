"""Typed async clients of the internal services, shared by the gateway and the workers.

Each takes and returns domain types and raises catalog errors, never AioRpcError.
"""
