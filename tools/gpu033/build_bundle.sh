#!/usr/bin/env bash
# Build the offline bundle for the H200 reference run. Runs on a build machine with network access and
# python3 + pip (the GPU machine itself has no network): vLLM 0.26.0 for CPython 3.12 / manylinux x86_64
# plus the dependency pins in deps.txt, unpacked into site/, slimmed, and packed into xz parts < 60 MiB.
#
#   tools/gpu033/build_bundle.sh [BUILD_DIR]   (default: $BUILD_DIR, else ./build/gpu-bundle; make_parts.sh runs it)
#
# Result: BUILD_DIR/parts/p1/{p1.tar.xz,p1b.tar.xz}, parts/p2/p2.tar.xz, parts/p3/p3.tar.xz, parts/SHA256SUMS.
# make_parts.sh cuts p1 + p1b + p2 into transport chunks; burst.py bundle rebuilds and unpacks them on the
# GPU machine (see README.md). A vLLM wheel already present in BUILD_DIR/wheels/
# is reused instead of downloaded.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BUILD="${1:-${BUILD_DIR:-./build/gpu-bundle}}"
VLLM_VERSION="${VLLM_VERSION:-0.26.0}"
MAX_PART=$((60 * 1024 * 1024))
mkdir -p "$BUILD"; BUILD="$(cd "$BUILD" && pwd)"
WHEELS="$BUILD/wheels"; DEPWH="$BUILD/depwh"; OVERWH="$BUILD/overwh"; B="$BUILD/bundle"; PARTS="$BUILD/parts"
rm -rf "$B" "$PARTS"
mkdir -p "$WHEELS" "$DEPWH" "$OVERWH" "$B/site" "$B/over" "$PARTS/p1" "$PARTS/p2" "$PARTS/p3"

# Target: CPython 3.12, glibc manylinux x86_64 (the GPU machine has Python 3.12.3, torch 2.11.0+cu130).
# The same flags go to `pip install --target`, so the build machine's own Python version does not matter.
PLAT=(--only-binary=:all: --python-version 3.12 --implementation cp
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_31_x86_64
      --platform manylinux_2_34_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_26_x86_64
      --platform manylinux_2_5_x86_64)

# 1) the vLLM wheel, without dependencies (vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl, ~304 MB).
#    vLLM 0.26.0 pins torch==2.11.0, which must already be installed on the GPU machine.
WH=$(ls "$WHEELS"/vllm-"$VLLM_VERSION"-*.whl 2>/dev/null | head -1 || true)
if [ -z "$WH" ]; then
  python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$WHEELS" "vllm==$VLLM_VERSION"
  WH=$(ls "$WHEELS"/vllm-"$VLLM_VERSION"-*.whl | head -1)
fi
echo "vllm wheel: $WH"

# 2) dependencies: the closure pip computes for vLLM's Requires-Dist minus the GPU extras, against the
#    GPU machine's own package list (numpy etc. come from there). Exact pins: deps.txt ('*' = imported
#    at startup, ' ' = shipped for lazy/optional imports).
python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$DEPWH" \
  -r <(grep -E '^[* ] ' "$HERE/deps.txt" | sed 's/^[* ] //')
python3 -m pip install -q --no-index --no-deps --no-compile "${PLAT[@]}" --target "$B/site" "$DEPWH"/*.whl
#    optional overrides for packages the GPU machine might have in too old a version (not needed in the
#    reference run; devcheck.py tries site/ alone first and adds over/ only if imports fail)
python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$OVERWH" \
  -r <(sed -n '/^# fallback overrides/,$p' "$HERE/deps.txt" | grep -E '^#   [A-Za-z0-9_.-]+==' | sed 's/^#   //')
python3 -m pip install -q --no-index --no-deps --no-compile "${PLAT[@]}" --target "$B/over" "$OVERWH"/*.whl

# 3) unpack and slim vLLM (731.8 MB unpacked):
#    - vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so (304.7 MB): FlashAttention-2 kernels; the H200 (Hopper)
#      uses FlashAttention 3 (_vllm_fa3_C.abi3.so is kept)
#    - vllm/vllm-rs (42.8 MB): the optional Rust frontend binary (only used with VLLM_USE_RUST_FRONTEND=1)
#    - C/C++/CUDA headers and sources under vllm/third_party (1,769 files, 54.6 MB): build-time only
if command -v unzip >/dev/null 2>&1; then (cd "$B/site" && unzip -q -o "$WH")
else python3 -m zipfile -e "$WH" "$B/site"; fi
(cd "$B/site" && rm -f vllm/vllm-rs vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so && \
  find vllm/third_party -type f \( -name '*.h' -o -name '*.hpp' -o -name '*.inl' -o -name '*.cuh' \
       -o -name '*.cu' -o -name '*.cpp' \) -delete)

# 4) parts, each < 60 MiB (xz; the GPU machine has xz, python's tarfile is the fallback there)
cd "$B"
printf 'site/vllm/_C_stable_libtorch.abi3.so\nsite/vllm/_moe_C_stable_libtorch.abi3.so\nsite/vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so\n' > "$BUILD/excl.txt"
tar -cf - --exclude-from="$BUILD/excl.txt" site | xz -9 -T2 > "$PARTS/p1/p1.tar.xz"            # ~34 MB
tar -cf - site/vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so over | xz -9e > "$PARTS/p1/p1b.tar.xz" # ~8.4 MB
tar -cf - site/vllm/_C_stable_libtorch.abi3.so | xz -9e > "$PARTS/p2/p2.tar.xz"                # ~55.8 MB
tar -cf - site/vllm/_moe_C_stable_libtorch.abi3.so | xz -9e > "$PARTS/p3/p3.tar.xz"            # ~40.4 MB
(cd "$PARTS" && sha256sum p*/*.tar.xz > SHA256SUMS)
for f in "$PARTS"/p*/*.tar.xz; do
  sz=$(stat -c %s "$f"); echo "$(basename "$f") $sz bytes"
  [ "$sz" -lt "$MAX_PART" ] || { echo "part over 60 MiB: $f" >&2; exit 1; }
done
