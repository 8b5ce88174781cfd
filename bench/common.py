"""What the benchmarks share: paths, the model, starting the embedded stack, the watermark,
the consolidation passes.

The bench scripts are modules of the ``bench`` package, run from the repository root as
``python -m bench.<name>``, so that the import rules (.importlinter) cover them too.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from engram.gateway.v1 import admin_pb2, gateway_pb2
from engram_embed.paths import MODEL_NAME
from engram_testing.devstack import DevStack, start_stack

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
LOCOMO = ROOT.parent / "shared" / "data" / "locomo" / "locomo_dev.json"

Metadata = tuple[tuple[str, str], ...]


def auth(token: str) -> Metadata:
    return (("authorization", f"Bearer {token}"),)


def model_path(name: str = MODEL_NAME) -> Path:
    """An embedding model `make models` built under $ENGRAM_HOME (default .engram)."""
    home = Path(os.environ.get("ENGRAM_HOME", ROOT / ".engram")).resolve()
    return home / "models" / name


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def new_home(prefix: str) -> Path:
    """A fresh ENGRAM_HOME under bench/results (git-ignored), kept for its logs."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=RESULTS))


def profile_env(profile: str) -> dict[str, str]:
    """The stack's settings for running ``profile`` throughout: recall, scoring and the
    entity extraction of ingest and consolidate (engram_core.profiles)."""
    return {
        "ENGRAM_GATEWAY_PROFILE": profile,
        "ENGRAM_SCORING_PROFILE": profile,
        "ENGRAM_INGEST_ENTITIES__PROFILE": profile,
        "ENGRAM_CONSOLIDATE_ENTITIES__PROFILE": profile,
    }


def start_bench_stack(
    home: Path, model_dir: Path, extra_env: Mapping[str, str] | None = None
) -> DevStack:
    """The embedded stack on free ports, its embedders pointed at ``model_dir``."""
    env = {
        "ENGRAM_VECTOR_EMBED__MODEL_DIR": str(model_dir),
        "ENGRAM_INGEST_EMBED__MODEL_DIR": str(model_dir),
        "ENGRAM_CONSOLIDATE_EMBED__MODEL_DIR": str(model_dir),
        **(extra_env or {}),
    }
    return start_stack(home, gateway_port=0, extra_env=env)


async def wait_watermark(
    stub: Any,
    target: int,
    metadata: Metadata,
    label: str = "ingest",
    poll_s: float = 0.5,
    every_s: float = 5.0,
) -> None:
    """Poll Stats until the applied watermark covers ``target``; a progress line every
    ``every_s`` (plain lines: the output is often a log, not a terminal)."""
    started = last_print = time.monotonic()
    while True:
        stats = await stub.Stats(gateway_pb2.StatsRequest(), metadata=metadata, timeout=30)
        now = time.monotonic()
        done = stats.watermark >= target
        if done or now - last_print >= every_s:
            print(
                f"  {label}: watermark {stats.watermark}/{target} ({now - started:.0f}s)",
                flush=True,
            )
            last_print = now
        if done:
            return
        await asyncio.sleep(poll_s)


SCHEDULED_PASSES = ("decay", "associate", "cluster")  # forget is off unless configured
_BUSY = (admin_pb2.PASS_STATE_RUNNING, admin_pb2.PASS_STATE_PENDING)


def _seconds(ts: Timestamp) -> float:
    return ts.seconds + ts.nanos / 1e9


def _pass_name(mode: admin_pb2.ConsolidationMode.ValueType) -> str:
    return str(admin_pb2.ConsolidationMode.Name(mode)).removeprefix("CONSOLIDATION_MODE_").lower()


async def wait_passes(
    admin: Any,
    metadata: Metadata,
    since: float,
    timeout_s: float,
    poll_s: float = 2.0,
    every_s: float = 10.0,
    idle_grace_s: float = 180.0,
) -> dict[str, dict[str, Any]]:
    """Wait until the consolidate worker has no pass running or pending and each scheduled
    pass has finished a run started at or after ``since`` (epoch seconds): a fresh tenant
    gets its first passes within a tick of the ingest, and recall measured beside them
    measures them too. A pass that has not started after ``idle_grace_s`` with none
    running (three of the worker's ticks) is taken to be switched off. Returns each pass's
    last run (state, seconds, changes); a progress line every ``every_s``; TimeoutError
    after ``timeout_s``."""
    started = last_print = idle_since = time.monotonic()
    while True:
        status = await admin.ConsolidationStatus(
            admin_pb2.ConsolidationStatusRequest(), metadata=metadata, timeout=30
        )
        runs = {_pass_name(p.mode): p for p in status.passes}
        busy = [n for n, p in runs.items() if p.last_run.state in _BUSY or p.pending_run_id]
        waiting = [
            n
            for n in SCHEDULED_PASSES
            if n not in runs
            or not runs[n].last_run.HasField("finished_at")
            or _seconds(runs[n].last_run.started_at) < since
        ]
        now = time.monotonic()
        if busy:
            idle_since = now
        done = not busy and (not waiting or now - idle_since >= idle_grace_s)
        if done or now - last_print >= every_s:
            line = ", ".join(
                f"{n} {p.last_run.phase} {p.last_run.done}/{p.last_run.total}"
                for n, p in runs.items()
                if n in busy
            )
            print(
                f"  passes: running {line or '-'}; still to finish {', '.join(waiting) or '-'} "
                f"({now - started:.0f}s)",
                flush=True,
            )
            last_print = now
        if done and waiting:
            print(f"  passes: {', '.join(waiting)} did not run: taken as switched off", flush=True)
        if done:
            return {
                n: {
                    "state": admin_pb2.PassState.Name(p.last_run.state),
                    "duration_s": p.last_run.duration_s,
                    "changes": {c.kind: c.count for c in p.last_run.changes},
                }
                for n, p in runs.items()
                if p.HasField("last_run")
            }
        if now - started > timeout_s:
            raise TimeoutError(f"consolidation passes still busy after {timeout_s:.0f}s")
        await asyncio.sleep(poll_s)
