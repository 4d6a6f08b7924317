#!/usr/bin/env bash
# One GPU reference run from the repository root: tools/gpuref/run.sh DIR SHAPE [--rehearse] [run.py options]
#   SHAPE: 0.6b | 14b (one GPU), dp2 | tp2 (two GPUs); --rehearse: the product's simulator stands in for vLLM.
# PYTHON picks the interpreter that has torch and vLLM (default python3); GPUREF_SITE names an unpacked
# offline vLLM bundle (tools/gpuref/bundle.sh). The product runs from this checkout (PYTHONPATH), so an
# install is optional. See tools/gpuref/README.md.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${PYTHON:-python3}"
[ $# -ge 2 ] || { echo "usage: tools/gpuref/run.sh DIR SHAPE [--rehearse] [options]" >&2; exit 2; }
SITE=()
[ -n "${GPUREF_SITE:-}" ] && SITE=(--site "$GPUREF_SITE")
export PYTHONUNBUFFERED=1
exec "$PY" "$HERE/run.py" "$@" --python "$PY" "${SITE[@]}"
