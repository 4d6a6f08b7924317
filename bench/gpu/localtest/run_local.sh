#!/usr/bin/env bash
# Local rehearsal of the device sequence, without a GPU: the real bundle chunks from .gpu-bundle/ (built by
# build_bundle.sh) are loaded and unpacked exactly as on the GPU machine, each step sees only the chunk
# it would carry, and the servers are localtest/mock_vllm.py. The exporter is localtest/stub_exporter.py
# unless KVO_EXPORTER is set (e.g. KVO_EXPORTER="python3 -m exporter" once serve and check exist).
#
#   bash bench/gpu/localtest/run_local.sh [WORKDIR]      (default /tmp/kvo_local; needs ~1 GB, aiohttp)
#   FAST=1 ...   skip the 32B steps
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
GPU="$(dirname "$HERE")"
REPO="$(cd "$GPU/../.." && pwd)"
L="${1:-/tmp/kvo_local}"
PYV="${PYTHON:-$REPO/.venv/bin/python}"
[ -x "$PYV" ] || PYV=python3
rm -rf "$L"; mkdir -p "$L/carry1" "$L/carry2" "$L/carry3"
for i in 1 2; do ln -s "$REPO/.gpu-bundle/c$i" "$L/carry$i/c$i"; done
[ -d "$REPO/.gpu-bundle/p3" ] && ln -s "$REPO/.gpu-bundle/p3" "$L/carry3/p3"
export KVO_STORE="$L/store" PYTHON="$PYV" MOCK=1 MOCK_FLAG_DIR="$L" KVO_COMPILEALL="${KVO_COMPILEALL:-0}"
export KVO_EXPORTER="${KVO_EXPORTER:-$PYV $HERE/stub_exporter.py}" KVO_ROUNDS=3 KVO_ROUNDS_32B=2 KVO_SCRAPE_EVERY=1
# ports of their own: other local test suites may hold 8000/8001 (the device machine is ours alone)
PA=${KVO_PORT_A:-18000}; PB=${KVO_PORT_B:-18001}; LP=${KVO_LISTEN_PORT:-19400}
export KVO_PORT_A=$PA KVO_PORT_B=$PB KVO_LISTEN="127.0.0.1:$LP"
fails=0
expect() {  # expect RC NAME -- command...
  local want=$1 name=$2; shift 3
  local t0=$(date +%s); "$@" > "$L/$name.stdout" 2>&1; local rc=$?
  if [ "$rc" = "$want" ]; then echo "PASS $name (rc=$rc, $(( $(date +%s) - t0 ))s)"
  else echo "FAIL $name: rc=$rc, wanted $want"; tail -30 "$L/$name.stdout"; fails=$((fails + 1)); fi
}
outcheck() {  # outcheck NAME DIR FILE...
  local name=$1 d=$2; shift 2
  local n; n=$(ls "$d" | wc -l)
  for f in "$@"; do [ -s "$d/$f" ] || { echo "FAIL $name: $d/$f missing"; fails=$((fails + 1)); }; done
  [ "$n" -le 8 ] || { echo "FAIL $name: $n files in $d (max 8)"; fails=$((fails + 1)); }
  echo "     $name: $n files: $(ls "$d" | tr '\n' ' ')"
}

# a later step on a fresh machine must refuse with 3
expect 3 fresh_step2 -- env OUT="$L/out0" KVO_BUNDLE_DIR="$L/carry2" bash "$GPU/device_step.sh" 2
# step 1 with chunk 1 only
expect 0 step1 -- env OUT="$L/out1" KVO_BUNDLE_DIR="$L/carry1" bash "$GPU/device_step.sh" 1
"$PYV" "$GPU/bundle.py" status "$KVO_STORE" p1.tar.xz p1b.tar.xz > /dev/null || { echo "FAIL p1/p1b not unpacked"; fails=$((fails + 1)); }
[ -f "$KVO_STORE/site/vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so" ] || { echo "FAIL fa3 missing"; fails=$((fails + 1)); }
[ -f "$KVO_STORE/site/vllm/_C_stable_libtorch.abi3.so" ] && { echo "FAIL p2 present after step 1"; fails=$((fails + 1)); }
outcheck step1 "$L/out1" step1.log
# step 2 with chunk 2 only: unpacks p2 and runs the 0.6B plumbing against the mocks
expect 0 step2 -- env OUT="$L/out2" KVO_BUNDLE_DIR="$L/carry2" bash "$GPU/device_step.sh" 2
[ -f "$KVO_STORE/site/vllm/_C_stable_libtorch.abi3.so" ] || { echo "FAIL p2 not unpacked"; fails=$((fails + 1)); }
cmp -s "$KVO_STORE/site/vllm/_C_stable_libtorch.abi3.so" "$REPO/.gpu-bundle/build/bundle/site/vllm/_C_stable_libtorch.abi3.so" \
  && echo "     p2 content identical to the build tree" || { echo "FAIL p2 differs from the build tree"; fails=$((fails + 1)); }
outcheck step2 "$L/out2" step2.log check.json evidence.tgz exporter_metrics.txt vllm_A_metrics.txt vllm_B_metrics.txt logs.tgz
grep -q 'kv_offload_load_bytes_total' "$L/out2/vllm_A_metrics.txt" || { echo "FAIL A metrics"; fails=$((fails + 1)); }
grep -qE '^(kvo_stub_target_up|kvoffload_up)' "$L/out2/exporter_metrics.txt" || { echo "FAIL exporter metrics"; fails=$((fails + 1)); }
grep -q 'P_evicted' "$L/out2/step2.log" || { echo "FAIL canary missing"; fails=$((fails + 1)); }
# the canary must see a CPU-tier hit on A and a recompute on B
grep -E 'canary A +P_evicted.*external_prefix_cache_hits' "$L/out2/step2.log" > /dev/null || { echo "FAIL no CPU-tier hit in A's canary"; fails=$((fails + 1)); }
if [ "${FAST:-0}" != 1 ]; then
  # 32B, auto: pair works with the mocks
  expect 0 step3_pair -- env OUT="$L/out3" KVO_BUNDLE_DIR="$L/none" bash "$GPU/device_step.sh" 3
  outcheck step3_pair "$L/out3" step3.log 32_check_32.json 32_exporter_metrics.txt 32_logs.tgz
  # 32B, auto, B fails on its first start: sequential plan (A kept, then B alone)
  expect 0 step3_seq -- env OUT="$L/out4" MOCK_FAIL_FIRST=$PB bash "$GPU/device_step.sh" 3
  outcheck step3_seq "$L/out4" step3.log 32_check_32A.json 32_check_32B.json 32_exporter_A_metrics.txt 32_exporter_B_metrics.txt 32_logs.tgz
  grep -q '32B mode: seq' "$L/out4/step3.log" || { echo "FAIL seq fallback"; fails=$((fails + 1)); }
fi
# phase A failing: exit 10 quickly, logs still packed
rm -f "$L"/mock_failed_*
expect 10 run06_failA -- env OUT="$L/out5" MOCK_FAIL_FIRST=$PA bash "$GPU/device_step.sh" run06
outcheck run06_failA "$L/out5" steprun06.log logs.tgz
# moe fallback: unpack p3, then the run again
if [ -d "$L/carry3/p3" ]; then
  expect 0 moe -- env OUT="$L/out6" KVO_BUNDLE_DIR="$L/carry3" bash "$GPU/device_step.sh" moe
  [ -f "$KVO_STORE/site/vllm/_moe_C_stable_libtorch.abi3.so" ] || { echo "FAIL p3 not unpacked"; fails=$((fails + 1)); }
fi
# no process of ours left listening
for p in $PA $PB $LP; do
  (echo > /dev/tcp/127.0.0.1/$p) 2>/dev/null && { echo "FAIL port $p still open"; fails=$((fails + 1)); }
done
echo "run_local: $fails failure(s); logs in $L"
[ $fails = 0 ]
