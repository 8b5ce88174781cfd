"""Shared plumbing: settings, logging, telemetry, gRPC and JetStream helpers."""
