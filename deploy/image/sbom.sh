#!/usr/bin/env bash
# A CycloneDX (JSON) SBOM of the Python packages the image holds: the seven services and
# what they depend on as locked in uv.lock (no dev group, no test library), each with its
# version, PyPI purl and the hashes of its locked files; the workspace (engram-workspace,
# its own packages) is the root component. Offline: uv exports the lock and cyclonedx-py
# (cyclonedx-bom, in the dev group) reads the export; nothing is installed or resolved.
set -euo pipefail
out=${1:?usage: deploy/image/sbom.sh OUT.json}
src=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$(dirname "$out")"
out="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"
cd "$src"

. deploy/image/packages.sh
# The workspace's packages are path requirements with no version: left out of the list,
# they are the root component (read from pyproject.toml).
uv export --frozen --no-dev --no-editable --no-emit-workspace --quiet "${service_args[@]}" \
  | PYTHONWARNINGS=ignore uv run --frozen --no-sync cyclonedx-py requirements - \
      --pyproject pyproject.toml --mc-type application --sv 1.6 --output-reproducible --of JSON \
      -o "$out"
echo "SBOM (CycloneDX JSON) of the image's Python packages in $out"
