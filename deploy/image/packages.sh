# Sourced from the repository root by assemble.sh and sbom.sh, so the image and its SBOM
# mean the same packages: service_args is `--package <name>` for each of the seven
# services (what the image installs, with what they depend on: neither the dev group nor
# the test library), fresh_args `--reinstall-package <name>` for every workspace package.
name_of() { sed -n 's/^name = "\(.*\)"$/\1/p' "$1" | head -1; }
service_args=() fresh_args=()
for manifest in services/*/pyproject.toml; do service_args+=(--package "$(name_of "$manifest")"); done
for manifest in libs/*/pyproject.toml services/*/pyproject.toml; do
  fresh_args+=(--reinstall-package "$(name_of "$manifest")")
done
