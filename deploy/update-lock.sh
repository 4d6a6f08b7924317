#!/usr/bin/env bash
# Regenerate deploy/requirements.lock (runtime dependencies of the image) and
# deploy/build-requirements.lock (setuptools, to build the exporter wheel) with exact pins and
# sha256 hashes of the wheels for CPython 3.12 on linux x86_64 and aarch64 (the Dockerfile's base).
#
#   bash deploy/update-lock.sh            # newest versions allowed by pyproject.toml
#
# Only pip is used, in a throw-away venv: `pip download --only-binary=:all:` resolves the dependency
# closure for the target interpreter and platform (not this machine's), `pip hash` hashes the files.
# Binary wheels only, so the image build never compiles anything and never falls back to an sdist.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PY" -m venv "$work/venv"
pip=("$work/venv/bin/pip" --disable-pip-version-check -q)
"${pip[@]}" install --upgrade pip

target=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312)
plat() {  # every manylinux tag a current wheel may carry, for one architecture
  for t in manylinux_2_28 manylinux_2_17 manylinux2014 manylinux_2_12 manylinux2010 manylinux_2_5 manylinux1; do
    printf -- '--platform\n%s_%s\n' "$t" "$1"
  done
}
# Runtime dependencies exactly as declared in pyproject.toml ([project] dependencies).
mapfile -t deps < <("$PY" - <<'PYEOF'
import tomllib
with open("pyproject.toml", "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["dependencies"]))
PYEOF
)
mapfile -t x86 < <(plat x86_64)
mapfile -t arm < <(plat aarch64)
"${pip[@]}" download --dest "$work/x86_64" "${target[@]}" "${x86[@]}" "${deps[@]}"
# The same pins for aarch64 (no re-resolution: both architectures get the identical set).
mapfile -t pins < <(ls "$work/x86_64" | "$PY" -c '
import sys
for f in sys.stdin.read().split():
    name, version = f.split("-")[:2]
    print(f"{name}=={version}")')
"${pip[@]}" download --dest "$work/aarch64" --no-deps "${target[@]}" "${arm[@]}" "${pins[@]}"
"${pip[@]}" download --dest "$work/build" --no-deps --only-binary=:all: 'setuptools>=68'

write_lock() {  # write_lock OUT HEADER DIR...
  local out=$1 header=$2
  shift 2
  "$PY" - "$out" "$header" "$@" <<'PYEOF'
import hashlib, pathlib, re, sys
out, header, dirs = sys.argv[1], sys.argv[2], sys.argv[3:]
pins: dict[tuple[str, str], set[str]] = {}
for d in dirs:
    for f in sorted(pathlib.Path(d).glob("*.whl")):
        name, version = f.name.split("-")[:2]
        name = re.sub(r"[-_.]+", "-", name).lower()
        pins.setdefault((name, version), set()).add(hashlib.sha256(f.read_bytes()).hexdigest())
lines = [header, "# Regenerate with: bash deploy/update-lock.sh (do not edit by hand).", ""]
for (name, version), hashes in sorted(pins.items()):
    lines.append(f"{name}=={version} \\")
    hs = sorted(hashes)
    lines += [f"    --hash=sha256:{h}" + (" \\" if i < len(hs) - 1 else "") for i, h in enumerate(hs)]
pathlib.Path(out).write_text("\n".join(lines) + "\n")
PYEOF
}
write_lock deploy/requirements.lock \
  "# Runtime dependencies of the kvoffload-exporter image: CPython 3.12, linux x86_64 + aarch64 wheels." \
  "$work/x86_64" "$work/aarch64"
write_lock deploy/build-requirements.lock \
  "# Build backend for the exporter wheel in the image's build stage (pyproject.toml [build-system])." \
  "$work/build"
echo "wrote deploy/requirements.lock and deploy/build-requirements.lock"
