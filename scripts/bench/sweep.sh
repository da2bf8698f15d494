#!/usr/bin/env bash
# Issue #13's admission benchmark: one 10,000-trial sweep through the API
# (expand, validate and route every trial; one CreateSweep script with every
# trial's record, route and ledger record) against its baseline, 10,000 raw
# asynq enqueues, in the same run, each on its own real redis-server.
#   scripts/bench/sweep.sh [count]     (default 5)
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/cgoflags.sh # quiets go-nvml's cgo deprecation warnings
n="${1:-5}"
out=$(go test -run '^$' -bench 'SweepSubmit10000|EnqueueRaw10000' -benchtime 3x -count "$n" ./scheduler/ 2>&1)
echo "$out" | grep -E '^(Benchmark|cpu|ok|FAIL)'
echo "$out" | awk '
  /^BenchmarkSweepSubmit10000/ { sw[++ns]=$3/1e9 }
  /^BenchmarkEnqueueRaw10000/  { raw[++nr]=$3/1e9 }
  function median(a, n,   i, j, t) { for (i=1;i<=n;i++) for (j=i+1;j<=n;j++) if (a[j]<a[i]) { t=a[i]; a[i]=a[j]; a[j]=t }; return a[int((n+1)/2)] }
  END {
    if (ns && nr) { s=median(sw, ns); r=median(raw, nr)
      printf "10,000-trial sweep admitted: median %.3f s (goal < 1 s); 10,000 raw asynq enqueues: median %.3f s; ratio %.1fx\n", s, r, s/r }
  }'
