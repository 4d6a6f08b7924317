#!/usr/bin/env bash
# Build the offline vLLM bundle for the H200 reference run (bench/gpu/README.md).
#
#   bash bench/gpu/build_bundle.sh [OUT_DIR]          (default: <repo>/.gpu-bundle, git-ignored)
#
# Runs on a build machine WITH network access to the Python package index (the GPU machine has none):
# vLLM 0.26.0 for CPython 3.12 / manylinux x86_64 + the pins in bench/gpu/deps.txt, unpacked into site/,
# slimmed, packed into xz parts, and the parts needed for a dense model cut into byte-chunks that fit
# one device `run` each (64 MiB per command, working tree included).
#
# Result (OUT_DIR):
#   parts/p1.tar.xz    site/ without the three big .so files, plus over/ and xdeps/     (~35 MB)
#   parts/p1b.tar.xz   site/vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so (FlashAttention 3)  (~8 MB)
#   parts/p2.tar.xz    site/vllm/_C_stable_libtorch.abi3.so                                (~56 MB)
#   parts/p3.tar.xz    site/vllm/_moe_C_stable_libtorch.abi3.so (MoE kernels; a dense Qwen3 does not
#                      need them: vllm imports it under contextlib.suppress(ImportError))  (~40 MB)
#   c1/{chunk.1,MANIFEST}, c2/{chunk.2,MANIFEST}   p1+p1b+p2 cut into KVO_CHUNKS (2) equal chunks:
#                      what device_step.sh 1 and 2 carry
#   p3/{p3.tar.xz,MANIFEST}                          the optional MoE part (device_step.sh moe)
#   SHA256SUMS, BUILD_INFO
#   build/             downloads and the unpacked tree (reused by a re-run: wheels are not downloaded twice)
#
# Env: XZ_LEVEL (default 9; 9e is smaller and much slower), XZ_THREADS (default 1), KVO_CHUNKS (default 2),
#      VLLM_VERSION (0.26.0), SKIP_P3=1 (do not build the optional MoE part).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
OUT="${1:-$REPO/.gpu-bundle}"
VLLM_VERSION="${VLLM_VERSION:-0.26.0}"
XZ_LEVEL="${XZ_LEVEL:-9}"
XZ_THREADS="${XZ_THREADS:-1}"
NCHUNKS="${KVO_CHUNKS:-2}"
MAX_PART=$((60 * 1024 * 1024))
PY="${PYTHON:-python3}"
mkdir -p "$OUT"; OUT="$(cd "$OUT" && pwd)"
BUILD="$OUT/build"
WHEELS="$BUILD/wheels"; DEPWH="$BUILD/depwh"; OVERWH="$BUILD/overwh"; XWH="$BUILD/xwh"; B="$BUILD/bundle"
T0=$(date +%s)
say() { echo "[build $(( $(date +%s) - T0 ))s] $*"; }

rm -rf "$B" "$OUT/parts" "$OUT"/c[0-9]* "$OUT/p3"
mkdir -p "$WHEELS" "$DEPWH" "$OVERWH" "$XWH" "$B/site" "$B/over" "$B/xdeps" "$OUT/parts"

# Target: CPython 3.12, glibc manylinux x86_64 (GPU machine: Python 3.12.3, torch 2.11.0+cu130 preinstalled).
# The same flags go to `pip install --target`, so the build machine's own Python version does not matter.
PLAT=(--only-binary=:all: --python-version 3.12 --implementation cp
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_31_x86_64
      --platform manylinux_2_34_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_26_x86_64
      --platform manylinux_2_12_x86_64 --platform manylinux2010_x86_64 --platform manylinux_2_5_x86_64)
PIP=(nice -n 10 "$PY" -m pip)

# 1) the vLLM wheel, without dependencies (vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl, ~304 MB).
#    vLLM 0.26.0 pins torch==2.11.0, exactly the torch preinstalled on the GPU machine: torch is not shipped.
WH=$(ls "$WHEELS"/vllm-"$VLLM_VERSION"-*.whl 2>/dev/null | head -1 || true)
if [ -z "$WH" ]; then
  say "downloading vllm==$VLLM_VERSION"
  "${PIP[@]}" download -q --no-deps "${PLAT[@]}" -d "$WHEELS" "vllm==$VLLM_VERSION"
  WH=$(ls "$WHEELS"/vllm-"$VLLM_VERSION"-*.whl | head -1)
fi
say "vllm wheel: $WH ($(stat -c %s "$WH") B)"

# 2) site/: the dependency closure of vLLM minus the GPU extras and minus what the GPU machine has
#    (deps.txt lines '* NAME==VER' / '  NAME==VER').
say "downloading + installing site/ deps"
"${PIP[@]}" download -q --no-deps "${PLAT[@]}" -d "$DEPWH" \
  -r <(grep -E '^[* ] ' "$HERE/deps.txt" | sed 's/^[* ] //')
"${PIP[@]}" install -q --no-index --no-deps --no-compile "${PLAT[@]}" --target "$B/site" "$DEPWH"/*.whl
#    over/: optional newer copies of small packages (deps.txt '#   NAME==VER' under "fallback overrides");
#    only put on PYTHONPATH if the import test with site/ alone fails.
"${PIP[@]}" download -q --no-deps "${PLAT[@]}" -d "$OVERWH" \
  -r <(sed -n '/^# fallback overrides/,/^$/p' "$HERE/deps.txt" | grep -E '^#   [A-Za-z0-9_.-]+==' | sed 's/^#   //')
"${PIP[@]}" install -q --no-index --no-deps --no-compile "${PLAT[@]}" --target "$B/over" "$OVERWH"/*.whl
#    xdeps/: the exporter's runtime deps (deps.txt '#x  NAME==VER'); the GPU machine has them preinstalled,
#    this copy is only used if the exporter preflight fails with the machine's own packages.
"${PIP[@]}" download -q --no-deps "${PLAT[@]}" -d "$XWH" \
  -r <(grep -E '^#x  [A-Za-z0-9_.-]+==' "$HERE/deps.txt" | sed 's/^#x  //')
"${PIP[@]}" install -q --no-index --no-deps --no-compile "${PLAT[@]}" --target "$B/xdeps" "$XWH"/*.whl
rm -rf "$B"/site/bin "$B"/over/bin "$B"/xdeps/bin

# 3) unpack and slim vLLM (731.8 MB unpacked -> site/ ~507 MB with all deps):
#    - vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so (304.7 MB): FlashAttention-2 kernels; the H200 (Hopper)
#      uses FlashAttention 3 (_vllm_fa3_C.abi3.so is kept, in p1b)
#    - vllm/vllm-rs (42.8 MB): the optional Rust frontend (only used with VLLM_USE_RUST_FRONTEND=1)
#    - C/C++/CUDA headers and sources under vllm/third_party (1,769 files, 54.6 MB): build-time only
say "unpacking vllm"
if command -v unzip >/dev/null 2>&1; then (cd "$B/site" && unzip -q -o "$WH")
else "$PY" -m zipfile -e "$WH" "$B/site"; fi
(cd "$B/site" && rm -f vllm/vllm-rs vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so && \
  find vllm/third_party -type f \( -name '*.h' -o -name '*.hpp' -o -name '*.inl' -o -name '*.cuh' \
       -o -name '*.cu' -o -name '*.cpp' \) -delete)
for f in vllm/_C_stable_libtorch.abi3.so vllm/_moe_C_stable_libtorch.abi3.so vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so; do
  [ -f "$B/site/$f" ] || { echo "missing in wheel: $f" >&2; exit 1; }
done
say "site/ $(du -sm "$B/site" | cut -f1) MB, over/ $(du -sm "$B/over" | cut -f1) MB, xdeps/ $(du -sm "$B/xdeps" | cut -f1) MB"

# 4) parts (xz, one thread, low priority: the build machine is shared)
XZ=(nice -n 19 xz -z -c "-$XZ_LEVEL" "-T$XZ_THREADS")
TAR=(tar --sort=name --owner=0 --group=0 --numeric-owner -cf -)
cd "$B"
printf 'site/vllm/_C_stable_libtorch.abi3.so\nsite/vllm/_moe_C_stable_libtorch.abi3.so\nsite/vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so\n' > "$BUILD/excl.txt"
say "xz p1";  "${TAR[@]}" --exclude-from="$BUILD/excl.txt" site over xdeps | "${XZ[@]}" > "$OUT/parts/p1.tar.xz"
say "xz p1b"; "${TAR[@]}" site/vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so | "${XZ[@]}" > "$OUT/parts/p1b.tar.xz"
say "xz p2";  "${TAR[@]}" site/vllm/_C_stable_libtorch.abi3.so | "${XZ[@]}" > "$OUT/parts/p2.tar.xz"
if [ "${SKIP_P3:-0}" != 1 ]; then
  say "xz p3"; "${TAR[@]}" site/vllm/_moe_C_stable_libtorch.abi3.so | "${XZ[@]}" > "$OUT/parts/p3.tar.xz"
fi
cd "$OUT"
(cd parts && sha256sum p*.tar.xz > SHA256SUMS)

# 5) chunks for transport: p1 + p1b + p2 concatenated and cut into NCHUNKS equal byte-chunks
#    (c1 holds all of p1 and p1b, so device step 1 can unpack and check them); p3 travels on its own.
BUILD_ID="vllm${VLLM_VERSION}-$(date -u +%Y%m%dT%H%M%SZ)-$(cat parts/p1.tar.xz parts/p1b.tar.xz parts/p2.tar.xz | sha256sum | cut -c1-12)"
"$PY" "$HERE/bundle.py" make "$OUT" "$BUILD_ID" "$NCHUNKS" parts/p1.tar.xz parts/p1b.tar.xz parts/p2.tar.xz
if [ -f parts/p3.tar.xz ]; then
  "$PY" "$HERE/bundle.py" single "$OUT/p3" "$BUILD_ID" parts/p3.tar.xz
fi
sha256sum c*/chunk.* p3/*.tar.xz 2>/dev/null > SHA256SUMS

# 6) size check: every file that travels must stay under 60 MiB (64 MiB per command, tree included)
rc=0
{
  echo "build_id $BUILD_ID"
  echo "vllm $VLLM_VERSION wheel $(basename "$WH")"
  echo "xz -$XZ_LEVEL -T$XZ_THREADS, built $(date -u +%FT%TZ) in $(( $(date +%s) - T0 )) s"
  echo "site_mb $(du -sm "$B/site" | cut -f1)"
  for f in parts/*.tar.xz c*/chunk.* p3/*.tar.xz; do
    [ -f "$f" ] || continue
    sz=$(stat -c %s "$f"); printf '%-16s %10d B  %6.2f MiB\n' "$f" "$sz" "$(awk -v s="$sz" 'BEGIN{print s/1048576}')"
  done
  for d in c[0-9]* p3; do
    if [ -d "$d" ]; then printf 'carry %-5s %6.2f MiB\n' "$d" "$(awk -v s="$(du -sb "$d" | cut -f1)" 'BEGIN{print s/1048576}')"; fi
  done
} | tee BUILD_INFO
for f in parts/*.tar.xz c*/chunk.* p3/*.tar.xz; do
  [ -f "$f" ] || continue
  [ "$(stat -c %s "$f")" -lt "$MAX_PART" ] || { echo "OVER 60 MiB: $f" >&2; rc=1; }
done
say "done (rc=$rc)"
exit $rc
