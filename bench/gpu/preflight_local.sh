#!/usr/bin/env bash
# Local check before spending device time (no GPU, ~10 s): is the bundle built, does every call stay under
# the 64 MiB that one device `run` may carry (working tree + carried paths), do the exporter's `serve`
# and `check` accept every flag that device_step.sh passes?
#
#   bash bench/gpu/preflight_local.sh          exit 0 = ready for the device sequence in README.md
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
cd "$REPO"
B=.gpu-bundle
LIMIT=$((64 * 1024 * 1024))
PY="${PYTHON:-python3}"
[ -x "$REPO/.venv/bin/python" ] && PY="${PYTHON:-$REPO/.venv/bin/python}"
bad=0
mib() { awk -v s="$1" 'BEGIN{printf "%.2f MiB", s/1048576}'; }

for f in "$HERE"/*.sh "$HERE"/localtest/*.sh; do bash -n "$f" || { echo "syntax error: $f"; bad=1; }; done

# what travels with every call: tracked + untracked-but-not-ignored files (.venv, .gpu-bundle are ignored)
tree=$(git ls-files -co --exclude-standard -z | xargs -0 -r stat -c %s -- 2>/dev/null | awk '{s+=$1} END{print s+0}')
echo "working tree that travels: $(mib "$tree") ($(git ls-files -co --exclude-standard | wc -l) files)"
if [ ! -f "$B/BUILD_INFO" ]; then echo "no bundle: run bash bench/gpu/build_bundle.sh"; bad=1; else
  grep -E '^build_id' "$B/BUILD_INFO"
  for d in "$B"/c[0-9]* "$B/p3"; do
    [ -d "$d" ] || continue
    c=$(du -sb "$d" | cut -f1); tot=$((tree + c))
    st=OK; [ $tot -lt $LIMIT ] || { st="OVER 64 MiB: rebuild with KVO_CHUNKS=3 (then step 2 twice) or slim the tree"; bad=1; }
    echo "call carrying $d: $(mib "$c") + tree = $(mib $tot)  $st"
  done
  (cd "$B" && sha256sum --quiet -c SHA256SUMS) || { echo "bundle checksums do not match"; bad=1; }
fi
# the biggest travelling files, in case the tree is large
git ls-files -co --exclude-standard -z | xargs -0 -r du -b -- 2>/dev/null | sort -rn | head -5 | sed 's/^/  big: /'

# the exporter's sub-commands must know every flag that device_step.sh uses
for sub in serve check; do
  out=$("$PY" -m exporter "$sub" --help 2>&1); rc=$?
  if [ $rc != 0 ]; then echo "exporter $sub --help: rc=$rc (sub-command missing?)"; echo "$out" | tail -3; bad=1; continue; fi
  tmpl=$(grep -E "^\[ -n \"\\\$\{KVO_$( [ $sub = serve ] && echo SERVE || echo CHECK )_ARGS" "$HERE/device_step.sh")
  flags=$(echo "$tmpl" | grep -oE -- '--[a-z][a-z-]+' | sort -u)
  [ $sub = check ] && flags="$flags --control-target"   # filled in through {control}
  for flag in $flags; do
    echo "$out" | grep -q -- "$flag" || { echo "exporter $sub: flag $flag not in --help"; bad=1; }
  done
  echo "exporter $sub: flags OK"
done
[ $bad = 0 ] && echo "PREFLIGHT OK" || echo "PREFLIGHT: problems above"
exit $bad
