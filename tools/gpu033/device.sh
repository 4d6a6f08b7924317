#!/usr/bin/env bash
# Device side, one step per `run` call, from the repository root (tools/gpu033/README.md has the sequence).
#   bash .gpu033/tools/device.sh 1            carry .gpu033/tools .gpu033/c1: chunk 1 -> /tmp, unpack p1 + p1b,
#                                             machine facts, import test, compileall, exporter preflight
#   bash .gpu033/tools/device.sh 2 [MODE [PRESET]]  carry .gpu033/tools .gpu033/c2: chunk 2 -> unpack p2;
#                                             then MODE (run | check, default run) on PRESET (default 0.6b)
#   bash .gpu033/tools/device.sh run PRESET   carry .gpu033/tools: A + B, chain, check, sweep (0.6b | 14b)
#   bash .gpu033/tools/device.sh check PRESET carry .gpu033/tools: A + B and the product's check only
#                                             (G033_CHECK_ARGS='check ... --concurrency 1,8,32 ...')
#   bash .gpu033/tools/device.sh stop         kill what an interrupted run left
# Exit codes: 0 ok; 2 bundle/carry problem; 3 fresh machine (start again at step 1); 4 bundle incomplete;
# 10/11 server A/B did not come up; 12 check failed or timed out.
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TMPD="${TMPDIR:-$(dirname "$(mktemp -u)")}"
export G033_STORE="${G033_STORE:-$TMPD/g033}"
export G033_T0="${G033_T0:-$(date +%s)}"
export OUT="${OUT:-$TMPD/g033_out}"
export PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
STEP="${1:?usage: device.sh 1|2|run PRESET|check PRESET|stop}"
mkdir -p "$OUT" "$G033_STORE"
need_marker() {
  [ -f "$G033_STORE/marker" ] || { echo "FRESH MACHINE: $G033_STORE/marker missing -> start again at step 1"; exit 3; }
  echo "marker: $(cat "$G033_STORE/marker")"
}
main() {
  echo "== device.sh $* $(date -u +%FT%TZ) cwd $(pwd)"
  case "$STEP" in
    1)
      [ -d .gpu033/c1 ] || { echo "carry .gpu033/c1"; return 2; }
      "$PY" "$HERE/burst.py" bundle .gpu033/c1; rc=$?
      [ $rc = 0 ] || [ $rc = 4 ] || return 2
      G033_DEADLINE_S=250 "$PY" "$HERE/burst.py" prepare
      ;;
    2)
      need_marker
      [ -d .gpu033/c2 ] || { echo "carry .gpu033/c2"; return 2; }
      "$PY" "$HERE/burst.py" bundle .gpu033/c2 || return $?
      "$PY" "$HERE/burst.py" "${2:-run}" "${3:-0.6b}"
      ;;
    run|check)
      need_marker
      "$PY" "$HERE/burst.py" "$STEP" "${2:?preset}"
      ;;
    stop) "$PY" "$HERE/burst.py" stop ;;
    *) echo "unknown step $STEP"; return 2 ;;
  esac
}
main "$@" 2>&1 | tee -a "$OUT/step_${STEP}${2:+_$2}${3:+_$3}.log"
exit "${PIPESTATUS[0]}"
