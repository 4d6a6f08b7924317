#!/usr/bin/env bash
# Build machine (network to the package index): the vLLM 0.26.0 bundle, cut into the transport chunks the
# device calls carry. Why 0.26.0: it is the newest vLLM release that pins torch==2.11.0, the torch the GPU
# machine has (0.27.0-0.32.0 pin 2.13.0, 0.33.0 pins 2.14.0; see README.md).
#
#   bash tools/gpu033/make_parts.sh [DEST]      (default DEST: <repo>/.gpu033, which must be git-ignored)
#
# Result: DEST/c1/{chunk.1,MANIFEST}, DEST/c2/{chunk.2,MANIFEST} (p1 + p1b + p2, ~49 MB each), DEST/tools/
# (a copy of this folder: the device calls carry it), DEST/SHA256SUMS. p3 (MoE kernels) is built but not
# carried: a dense Qwen3 never imports it.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(git -C "$HERE" rev-parse --show-toplevel)"
DEST="${1:-$REPO/.gpu033}"
N="${G033_CHUNKS:-2}"
git -C "$REPO" check-ignore -q "$DEST/x" || { echo "$DEST is not git-ignored: add '/.gpu033/' to .git/info/exclude" >&2; exit 1; }
mkdir -p "$DEST"
nice -n 5 bash "$HERE/build_bundle.sh" "$DEST/b026/out"
P="$DEST/b026/out/parts"
python3 "$HERE/chunks.py" "$DEST" "$N" "$P/p1/p1.tar.xz" "$P/p1/p1b.tar.xz" "$P/p2/p2.tar.xz"
cp "$P/SHA256SUMS" "$DEST/"
rm -rf "$DEST/tools" && cp -r "$HERE" "$DEST/tools"
du -sb "$DEST"/c* "$DEST/tools"
