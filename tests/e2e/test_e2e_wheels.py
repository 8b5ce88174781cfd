"""The SDK and MCP packages as a user gets them: wheels from `uv build`, installed into a
fresh virtual environment that has none of the workspace, where the SDK README's first
example and `engram-mcp` over stdio run against the embedded stack.

Needs uv (`uv run` names itself in $UV) and the package index for grpcio, protobuf and mcp;
without either the test fails rather than skips."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from engram_testing.devstack import DEV_TOKEN, DevStack

ROOT = Path(__file__).parents[2]
CHECKS = Path(__file__).with_name("wheel_checks.py")
PACKAGES = {"engram_api": "libs/api", "engram_client": "libs/sdk", "engram_mcp": "libs/mcp"}
TOOLS = sorted([
    "store_memory", "recall_memory", "get_memory", "update_memory", "delete_memory",
    "associate_memories", "related_memories", "memory_stats",
])  # fmt: skip


def _uv() -> str:
    uv = os.environ.get("UV") or shutil.which("uv")
    if uv is None:
        pytest.fail("uv builds the wheels: run the tests with `uv run` or put uv on PATH")
    return uv


def _run(args: list[str], env: dict[str, str] | None = None, cwd: Path = ROOT) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, f"{' '.join(args)}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("wheels")
    for path in PACKAGES.values():
        _run([_uv(), "build", "--wheel", "--quiet", "--out-dir", str(out), path])
    built = {p.name.split("-")[0]: p for p in out.glob("*.whl")}
    assert sorted(built) == sorted(PACKAGES)
    return built


@pytest.fixture(scope="module")
def venv(wheels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with the wheels and what they declare, at uv.lock's versions (constraints
    only: a dependency a wheel forgot to declare stays missing)."""
    root = tmp_path_factory.mktemp("venv")
    pins = root / "constraints.txt"
    _run([
        _uv(), "export", "--frozen", "--package", "engram-mcp", "--no-emit-workspace",
        "--no-dev", "--no-hashes", "--quiet", "--output-file", str(pins),
    ])  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH"}}
    venv = root / "venv"
    _run([_uv(), "venv", "--quiet", "--python", sys.executable, str(venv)], env, root)
    python = str(venv / "bin" / "python")
    install = [_uv(), "pip", "install", "--quiet", "--python", python, "-c", str(pins)]
    _run([*install, *map(str, wheels.values())], env, root)
    return venv


def _check(venv: Path, stack: DevStack, *args: str) -> dict[str, Any]:
    env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/tmp"),
        "ENGRAM_ADDRESS": stack.gateway_address,
        "ENGRAM_TOKEN": DEV_TOKEN,
    }
    out = _run([str(venv / "bin" / "python"), str(CHECKS), *args], env, venv.parent)
    *printed, last = out.splitlines()
    result: dict[str, Any] = json.loads(last) | {"printed": printed}
    assert not result["workspace_importable"]
    for name, origin in result["files"].items():
        assert origin.startswith(str(venv)), (name, origin)
    return result


def test_the_sdk_wheel_is_typed_and_for_python_3_10_on(wheels: dict[str, Path]) -> None:
    with zipfile.ZipFile(wheels["engram_client"]) as whl:
        assert "engram_client/py.typed" in whl.namelist()
        metadata = whl.read("engram_client-0.1.0.dist-info/METADATA").decode()
    assert "Requires-Python: >=3.10" in metadata.splitlines()
    for name in ("engram_api", "engram_mcp"):
        with zipfile.ZipFile(wheels[name]) as whl:
            [meta] = [n for n in whl.namelist() if n.endswith(".dist-info/METADATA")]
            assert "Requires-Python: >=3.10" in whl.read(meta).decode().splitlines(), name


def test_the_readme_example_runs_from_the_installed_wheel(venv: Path, stack: DevStack) -> None:
    readme = ROOT / "libs" / "sdk" / "README.md"
    out = _check(venv, stack, "sdk", str(readme))
    assert out["last_sequence"] > 0  # the store went through
    [line] = out["printed"]
    assert "billing ledger" in line  # and the recall found it
    assert out["files"]["engram_client"].endswith("engram_client/__init__.py")


def test_engram_mcp_from_the_installed_wheel_stores_and_recalls(
    venv: Path, stack: DevStack
) -> None:
    out = _check(venv, stack, "mcp")
    assert out["tools"] == TOOLS
    assert out["stored"]
    assert [id for id, _ in out["recalled"]] == [out["stored"]]
    assert "printer" in out["recalled"][0][1]
