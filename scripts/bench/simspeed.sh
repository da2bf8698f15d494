#!/usr/bin/env bash
# The speed of `lathe simulate` on one core (GOMAXPROCS=1), issue #25: each
# shared cluster in configs/traces/ at each pool size, with the cloud
# (configs/simulate.yaml) and without (scheduler/sim/testdata/simulate-nocloud.yaml,
# the same cut to its owned pool: the queue grows with the trace). Prints the
# wall seconds of each run (one `lathe simulate --owned N`, learned estimates),
# then, per case, the range over RUNS. A run past CAP seconds is stopped and
# shown as >CAP.
#   scripts/bench/simspeed.sh [RUNS]                 (default 3)
# Environment: OLD=path/to/lathe runs that binary too, alternated with this
# tree's, in the same loop (before/after as ratios new/old); CLUSTERS
# (default "01 02 03 08"), SIZES (default "16 32 64 128 256 512"), CAP (60).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/cgoflags.sh
runs=${1:-3}
clusters=${CLUSTERS:-01 02 03 08}
sizes=${SIZES:-16 32 64 128 256 512}
cap=${CAP:-60}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/new" ./cmd/lathe-full
bins=new
if [ -n "${OLD:-}" ]; then cp "$OLD" "$tmp/old"; bins="old new"; fi
echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD) runs=$runs cap=${cap}s $(nproc) cores, $(uptime | sed 's/.*load average/load average/')"
echo "# cluster owned cloud binary run seconds"
for r in $(seq "$runs"); do
  for c in $clusters; do
    for o in $sizes; do
      for cloud in cloud local; do
        cfg=configs/simulate.yaml
        [ "$cloud" = local ] && cfg=scheduler/sim/testdata/simulate-nocloud.yaml
        for b in $bins; do
          s=$(date +%s.%N)
          if timeout "$cap" env GOMAXPROCS=1 "$tmp/$b" simulate --trace "configs/traces/msft-itp-cluster$c.csv" \
            --config "$cfg" --owned "$o" >/dev/null 2>&1; then
            t=$(echo "$(date +%s.%N) - $s" | bc)
          else
            t=">$cap"
          fi
          printf '%s %s %s %s %s %s\n' "$c" "$o" "$cloud" "$b" "$r" "$t" | tee -a "$tmp/all"
        done
      done
    done
  done
done
echo "# cluster owned cloud: seconds min-max per binary over $runs runs (new/old ratio range when OLD is set)"
awk -v cap="$cap" '
  function v(x) { return x ~ /^>/ ? 1e9 : x + 0 }
  function f(x) { return x >= 1e9 ? ">" cap : sprintf("%.2f", x) }
  { k = $1 " " $2 " " $3; if (!(k in seen)) { seen[k] = 1; order[++n] = k }
    x = v($6); kb = k SUBSEP $4
    if (!(kb in lo) || x < lo[kb]) lo[kb] = x
    if (!(kb in hi) || x > hi[kb]) hi[kb] = x
    t[k, $4, $5] = x; runs[k, $5] = 1 }
  END {
    for (i = 1; i <= n; i++) {
      k = order[i]; line = k
      if ((k SUBSEP "old") in lo) {
        line = line sprintf("  old %s-%s", f(lo[k SUBSEP "old"]), f(hi[k SUBSEP "old"]))
        rl = 1e18; rh = 0
        for (r = 1; r <= 100; r++) if ((k, "old", r) in t && (k, "new", r) in t && t[k, "old", r] < 1e9 && t[k, "new", r] < 1e9) {
          q = t[k, "new", r] / t[k, "old", r]; if (q < rl) rl = q; if (q > rh) rh = q }
        line = line sprintf("  new %s-%s", f(lo[k SUBSEP "new"]), f(hi[k SUBSEP "new"]))
        line = line (rh > 0 ? sprintf("  new/old %.3f-%.3f", rl, rh) : "  new/old -")
      } else line = line sprintf("  %s-%s", f(lo[k SUBSEP "new"]), f(hi[k SUBSEP "new"]))
      print line
    }
  }' "$tmp/all"
