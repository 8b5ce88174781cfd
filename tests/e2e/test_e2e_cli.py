"""The `engram` command line against the embedded stack, as a user runs it: settings from
ENGRAM_ADDRESS / ENGRAM_TOKEN, store, update, list, a subscription that prints each event
until Ctrl-C, and a refusal that names the field (fixtures in conftest.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from typing import Any

import pytest

from engram_testing.devstack import DEV_TOKEN, DevStack

CLI = [sys.executable, "-m", "engram_clients.cli"]


@pytest.fixture
def env(stack: DevStack) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    return base | {"ENGRAM_ADDRESS": stack.gateway_address, "ENGRAM_TOKEN": DEV_TOKEN}


def engram(env: dict[str, str], *argv: str, code: int = 0) -> str:
    done = subprocess.run([*CLI, *argv], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == code, done.stderr
    return done.stdout if code == 0 else done.stderr


def reply(env: dict[str, str], *argv: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(engram(env, *argv))
    return value


def next_of(watcher: subprocess.Popen[str], memory_id: str) -> list[str]:
    """The subscription's next line about ``memory_id``: relation events pass any tag
    filter, so other suites' links may come between."""
    assert watcher.stdout is not None
    for _ in range(100):
        parts = watcher.stdout.readline().split(" ", 3)
        if parts[2:3] == [memory_id]:
            return parts
    raise AssertionError(f"no event of {memory_id}")


def test_store_update_list_and_a_subscription_that_sees_them(env: dict[str, str]) -> None:
    tag = f"cli:{uuid.uuid4().hex[:8]}"
    content = "The harbour crane is booked for Tuesday"
    stored = reply(env, "store", content, "--tag", tag)
    watcher = subprocess.Popen(
        [*CLI, "subscribe", "--tag", tag, "--from-sequence", stored["sequence"]],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = next_of(watcher, stored["id"])
        # Update reads the store: a recall that waits for the store first.
        engram(env, "recall", "crane", "--tag", tag, "--min-sequence", stored["sequence"])
        updated = reply(env, "update", stored["id"], "--importance", "0.9", "--tag", tag)
        second = next_of(watcher, stored["id"])
        watcher.send_signal(signal.SIGINT)
        _, err = watcher.communicate(timeout=30)
    finally:
        watcher.kill()
    assert first == [stored["sequence"], "stored", stored["id"], json.dumps(content) + "\n"]
    assert second[:3] == [updated["sequence"], "updated", stored["id"]]
    assert watcher.returncode == 0
    assert "Traceback" not in err
    engram(env, "recall", "crane", "--tag", tag, "--min-sequence", updated["sequence"])
    listed = [json.loads(line) for line in engram(env, "list", "--tag", tag).splitlines()]
    assert [(m["id"], m["importance"]) for m in listed] == [(stored["id"], 0.9)]


def test_a_refused_call_names_the_code_and_the_field(env: dict[str, str]) -> None:
    err = engram(env, "store", "too keen", "--importance", "2", code=1)
    assert err.startswith("INVALID_ARGUMENT: ")
    assert "(field: " in err
    assert "importance)" in err


def test_a_wrong_token_from_the_environment_is_refused(env: dict[str, str]) -> None:
    err = engram(env | {"ENGRAM_TOKEN": "not-a-token"}, "stats", code=1)
    assert err.startswith("UNAUTHENTICATED: ")
