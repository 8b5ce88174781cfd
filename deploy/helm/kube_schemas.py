"""Fetch the Kubernetes JSON schemas kubeconform checks the chart against, from PyPI.

kubeconform downloads its schemas from GitHub when it runs; the PyPI package
kubernetes-validate ships the same standalone strict schemas for each minor release. This
takes one release's ("-local-strict") out of its wheel into DEST, made loadable by
kubeconform: their `$id` (a kubernetes.io URL that relative references would resolve
against) is dropped and the references to the shared definitions become file-relative.

    python3 deploy/helm/kube_schemas.py PACKAGE==VERSION 1.27.0 DEST

Standard library only: it runs before the workspace exists.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

SHARED = "/api/_definitions.json#"


def fetch_wheel(requirement: str, into: Path) -> Path:
    pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
    subprocess.run([*pip, "--only-binary=:all:", "--dest", str(into), requirement], check=True)
    (wheel,) = into.glob("*.whl")
    return wheel


def loadable(schema: object) -> object:
    """``schema`` without `$id`, its shared-definition references made file-relative."""
    if isinstance(schema, dict):
        return {
            k: (
                v.replace(SHARED, "_definitions.json#")
                if k == "$ref" and isinstance(v, str)
                else loadable(v)
            )
            for k, v in schema.items()
            if k != "$id"
        }
    if isinstance(schema, list):
        return [loadable(v) for v in schema]
    return schema


def extract(wheel: Path, version: str, dest: Path) -> int:
    folder = f"kubernetes_validate/kubernetes-json-schema/v{version}-local-strict/"
    count = 0
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.startswith(folder) and name.endswith(".json"):
                schema = json.loads(archive.read(name))
                (dest / Path(name).name).write_text(json.dumps(loadable(schema)))
                count += 1
    if count == 0:
        raise SystemExit(f"{wheel.name} has no schemas for Kubernetes {version}")
    return count


def main(argv: list[str]) -> int:
    requirement, version, dest = argv
    with tempfile.TemporaryDirectory() as tmp:
        count = extract(fetch_wheel(requirement, Path(tmp)), version, Path(dest))
    print(f"{count} Kubernetes {version} schemas in {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
