"""Implementations of the gateway's ports that speak protos: the log, scoring, the cache codec."""
