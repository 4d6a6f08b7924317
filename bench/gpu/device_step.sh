#!/usr/bin/env bash
# GPU-machine side of the H200 reference run: one step per device `run` call (bench/gpu/README.md).
# Run from the repository root (the device tool starts every command there):
#
#   bash bench/gpu/device_step.sh 1      carry .gpu-bundle/c1   store chunk 1, unpack p1 + p1b (site/ without
#                                        the two big kernel .so files), machine facts, import test, bytecode
#                                        pre-compilation, exporter preflight                     (~45-60 s)
#   bash bench/gpu/device_step.sh 2      carry .gpu-bundle/c2   store chunk 2, unpack p2, then the 0.6B run:
#                                        vLLM A (:8000, CPU tier) + B (:8001, none), exporter serve + check,
#                                        built-in canary, final scrapes                        (~3-6 min)
#   bash bench/gpu/device_step.sh 3      no carry               optional: the 32B-shape run (KVO_32B_MODE)
#                                                                                                (~5-9 min)
#   bash bench/gpu/device_step.sh run06  no carry               the 0.6B run again (bundle already in /tmp)
#   bash bench/gpu/device_step.sh moe    carry .gpu-bundle/p3   fallback if step 2 failed for want of the MoE
#                                        kernels (_moe_C): unpack p3, then the 0.6B run again
#   bash bench/gpu/device_step.sh stop   kill what an interrupted run left;  `clean` also wipes the store
#
# Only /tmp survives between consecutive commands (while the machine stays warm, ~30 s after a call), so the
# bundle is unpacked into $KVO_STORE (/tmp/kvo_store). Step 1 writes $KVO_STORE/marker; every later step exits
# with code 3 if it is missing (a fresh machine: start again from step 1).
# Exit codes: 0 ok; 2 bundle/carry problem; 3 fresh machine (no marker); 4 bundle incomplete (carry the next
# chunk with step 2 again); 6 chunk from another build; 10 phase A did not start; 11 check failed or timed
# out; 12 check not run; 13/14 32B phase B not run / did not start.
# Files for the device tool go to $OUT (step log + up to 7 result files); see devrun.py.
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
cd "$REPO"
STEP="${1:?usage: device_step.sh 1|2|3|run06|moe|stop|clean}"
export KVO_T0="${KVO_T0:-$(date +%s)}"
export KVO_STORE="${KVO_STORE:-/tmp/kvo_store}"
export OUT="${OUT:-/tmp/kvo_out}"
export PYTHON="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1
BUNDLE_DIR="${KVO_BUNDLE_DIR:-.gpu-bundle}"
PY="$PYTHON"

# ============================ EXPORTER INVOCATION: adjust here ============================
# Command prefix (KVO_EXPORTER_SERVE / KVO_EXPORTER_CHECK override it for one sub-command), then the argument
# templates of `serve` and `check`; each may be overridden from the run command line, e.g.
#   KVO_CHECK_ARGS='check --target {target} {control} --json {json}' bash bench/gpu/device_step.sh 2
# The exporter runs with PYTHONPATH=<repo>:<bundle site> (+ bundle xdeps/ over/ if the preflight needs them).
# Placeholders filled by devrun.py:
#   {targets}  --target http://127.0.0.1:8000 --target http://127.0.0.1:8001   (one per running server)
#   {listen}   127.0.0.1:9400 (KVO_LISTEN)
#   {target}   http://127.0.0.1:8000 (phase A, CPU tier)     {control}  --control-target http://127.0.0.1:8001
#              (empty when only one server runs, e.g. the sequential 32B plan)
#   {rounds}   KVO_ROUNDS (10) / KVO_ROUNDS_32B (10)
#   {json}     check result file (copied to $OUT/check.json)   {evidence}  evidence dir (tarred to $OUT/evidence.tgz)
[ -n "${KVO_EXPORTER:-}" ]   || KVO_EXPORTER="$PY -m exporter"
[ -n "${KVO_SERVE_ARGS:-}" ] || KVO_SERVE_ARGS='serve {targets} --listen {listen} --poll-interval 1'
[ -n "${KVO_CHECK_ARGS:-}" ] || KVO_CHECK_ARGS='check --target {target} {control} --rounds {rounds} --allow-pressure --json {json} --out {evidence}'
export KVO_EXPORTER KVO_SERVE_ARGS KVO_CHECK_ARGS
# ==========================================================================================

mkdir -p "$OUT" "$KVO_STORE"

need_marker() {
  if [ ! -f "$KVO_STORE/marker" ]; then
    echo "FRESH MACHINE: $KVO_STORE/marker missing -> start again from step 1 (carry .gpu-bundle/c1)"
    exit 3
  fi
  echo "marker: $(cat "$KVO_STORE/marker") (now $(date +%s))"
}

carried_chunks() { ls -d "$BUNDLE_DIR"/c[0-9]* 2>/dev/null; }

load() {  # load the carried dirs given as arguments; rc 6 = other build
  local rc
  "$PY" "$HERE/bundle.py" load "$KVO_STORE" "$@"; rc=$?
  echo "bundle load rc=$rc"
  return $rc
}

main() {
  echo "== device_step $STEP  $(date -u +%FT%TZ)  repo $REPO  store $KVO_STORE  out $OUT"
  case "$STEP" in
    1)
      export KVO_DEADLINE_S="${KVO_DEADLINE_S:-270}"   # step 1 runs with timeout_s 300
      local dirs; dirs=$(carried_chunks)
      [ -n "$dirs" ] || { echo "no $BUNDLE_DIR/c* carried (carry .gpu-bundle/c1)"; return 2; }
      du -sh $dirs
      load $dirs; local rc=$?
      if [ $rc = 6 ]; then
        echo "store holds another build: wiping $KVO_STORE"
        "$PY" "$HERE/devrun.py" stop
        rm -rf "$KVO_STORE"; mkdir -p "$KVO_STORE"
        load $dirs; rc=$?
      fi
      [ $rc = 0 ] || return 2
      echo "$(date +%s) $(awk '$1=="build"{print $2}' "$KVO_STORE/MANIFEST")" > "$KVO_STORE/marker"
      "$PY" "$HERE/bundle.py" status "$KVO_STORE"
      "$PY" "$HERE/devrun.py" prepare
      ;;
    2|run06|moe)
      need_marker
      if [ "$STEP" = moe ]; then
        [ -d "$BUNDLE_DIR/p3" ] || { echo "carry .gpu-bundle/p3 for this step"; return 2; }
        load "$BUNDLE_DIR/p3" || return 2
      fi
      local dirs; dirs=$(carried_chunks)
      if [ -n "$dirs" ]; then
        load $dirs; local rc=$?
        [ $rc = 6 ] && { echo "chunk from another build than step 1: start again from step 1"; return 6; }
        [ $rc = 0 ] || return 2
      fi
      "$PY" "$HERE/bundle.py" status "$KVO_STORE" || { echo "bundle incomplete: carry the next chunk (step 2 again)"; return 4; }
      [ -f "$KVO_STORE/prepared" ] || "$PY" "$HERE/devrun.py" prepare
      "$PY" "$HERE/devrun.py" run06
      ;;
    3|run32)
      need_marker
      "$PY" "$HERE/bundle.py" status "$KVO_STORE" || return 4
      "$PY" "$HERE/devrun.py" run32
      ;;
    stop)
      "$PY" "$HERE/devrun.py" stop
      ;;
    clean)
      "$PY" "$HERE/devrun.py" stop
      rm -rf "$KVO_STORE"
      ;;
    *)
      echo "unknown step $STEP"; return 2 ;;
  esac
}

main 2>&1 | tee -a "$OUT/step$STEP.log"
exit "${PIPESTATUS[0]}"
