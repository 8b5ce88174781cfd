"""Quality and performance benchmarks, run as ``python -m bench.<name>`` from the root.

A package so that the import rules (.importlinter) see it: the benches use the services
through their gRPC API and engram_testing, never through their adapters.
"""
