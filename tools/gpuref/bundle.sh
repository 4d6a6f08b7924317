#!/usr/bin/env bash
# Offline vLLM bundle for a GPU host without network access (the host must already have Python 3.12 and
# torch 2.11.0, the torch vLLM 0.26.0 pins; the product's own dependencies are the host's or pip's).
#
#   tools/gpuref/bundle.sh build DEST [PIECE_MIB]   on a machine with network and pip: DEST/vllm-site.tar.xz
#                                                  cut into pieces of at most PIECE_MIB (default 47) MiB,
#                                                  DEST/MANIFEST (SHA-256 of the archive and of every piece)
#   tools/gpuref/bundle.sh install STORE PIECE...   on the GPU host: copies the pieces (and the MANIFEST
#                                                  beside them) into STORE; once every piece is there and
#                                                  checks out, unpacks STORE/site and byte-compiles it
#
# install may be called once per piece as they arrive (exit 4 until the set is complete). Afterwards:
#   GPUREF_SITE=STORE/site tools/gpuref/run.sh DIR 0.6b
# Exit codes: 0 done, 2 usage or a bad piece, 4 pieces still missing.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VLLM_VERSION="${VLLM_VERSION:-0.26.0}"
PY="${PYTHON:-python3}"

build() {
  local dest="$1" mib="${2:-47}"
  mkdir -p "$dest"; dest="$(cd "$dest" && pwd)"
  local wh="$dest/wheels" b="$dest/bundle"
  rm -rf "$b" "$dest"/vllm-site.tar.xz* "$dest/MANIFEST"; mkdir -p "$wh" "$b/site"
  # Target: CPython 3.12, glibc manylinux x86_64, whatever the build machine's own Python is.
  local plat=(--only-binary=:all: --python-version 3.12 --implementation cp)
  for n in 1 2014 _2_5 _2_17 _2_24 _2_26 _2_27 _2_28 _2_31 _2_34; do plat+=(--platform "manylinux${n}_x86_64"); done
  python3 -m pip download -q --no-deps "${plat[@]}" -d "$wh" "vllm==$VLLM_VERSION" \
    -r <(grep -E '^[* ] ' "$HERE/deps.txt" | sed 's/^[* ] //')
  python3 -m pip install -q --no-index --no-deps --no-compile "${plat[@]}" --target "$b/site" \
    $(ls "$wh"/*.whl | grep -v "/vllm-$VLLM_VERSION-")
  (cd "$b/site" && python3 -m zipfile -e "$wh"/vllm-"$VLLM_VERSION"-*.whl .)
  # What the H200 never loads (deps.txt, last section): FlashAttention 2, the Rust frontend, C/CUDA sources.
  (cd "$b/site" && rm -f vllm/vllm-rs vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so && \
    find vllm/third_party -type f \( -name '*.h' -o -name '*.hpp' -o -name '*.inl' -o -name '*.cuh' \
      -o -name '*.cu' -o -name '*.cpp' \) -delete)
  [ "${KEEP_MOE:-0}" = 1 ] || rm -f "$b/site/vllm/_moe_C_stable_libtorch.abi3.so"
  tar -C "$b" -cf - site | xz -9e -T0 > "$dest/vllm-site.tar.xz"
  (cd "$dest" && split -b "${mib}M" -d -a 2 vllm-site.tar.xz vllm-site.tar.xz.part && \
    { echo "archive $(sha256sum vllm-site.tar.xz)"; for p in vllm-site.tar.xz.part*; do echo "piece $(sha256sum "$p")"; done; } \
      > MANIFEST)
  rm -rf "$b"
  cat "$dest/MANIFEST"; ls -l "$dest"/vllm-site.tar.xz*
}

install() {
  local store="$1"; shift
  mkdir -p "$store"
  for p in "$@"; do
    cp "$p" "$store/"
    [ -f "$(dirname "$p")/MANIFEST" ] && cp "$(dirname "$p")/MANIFEST" "$store/"
  done
  cd "$store"
  [ -f MANIFEST ] || { echo "no MANIFEST beside the pieces" >&2; exit 2; }
  [ -d site/vllm ] && { echo "already unpacked: $store/site"; exit 0; }
  local missing=0
  while read -r kind sum name; do
    [ "$kind" = piece ] || continue
    if [ ! -f "$name" ]; then echo "missing $name"; missing=1
    elif [ "$(sha256sum "$name" | cut -d' ' -f1)" != "$sum" ]; then echo "bad $name (SHA-256)" >&2; exit 2; fi
  done < MANIFEST
  [ $missing = 0 ] || exit 4
  cat vllm-site.tar.xz.part* | tee vllm-site.tar.xz | sha256sum | cut -d' ' -f1 \
    | grep -qx "$(awk '$1 == "archive" {print $2}' MANIFEST)" || { echo "archive SHA-256 differs" >&2; exit 2; }
  tar -xJf vllm-site.tar.xz && rm -f vllm-site.tar.xz vllm-site.tar.xz.part*
  # The first server start would otherwise spend a minute compiling the bundle to bytecode.
  "$PY" -m compileall -q -j 0 site/vllm >/dev/null || true
  echo "unpacked: $store/site ($(du -sh site | cut -f1))"
}

case "${1:-}" in
  build) shift; build "$@" ;;
  install) shift; [ $# -ge 2 ] || { echo "usage: bundle.sh install STORE PIECE..." >&2; exit 2; }; install "$@" ;;
  *) echo "usage: tools/gpuref/bundle.sh build DEST [PIECE_MIB] | install STORE PIECE..." >&2; exit 2 ;;
esac
