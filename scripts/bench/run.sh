#!/usr/bin/env bash
# Lathe's benchmarks, each against its own real redis-server, in one run so
# the figures can be compared as ratios (this machine is shared and noisy).
# Prints the raw go test output, then the ratios that docs/benchmarks.md reports.
#   scripts/bench/run.sh [benchtime]     (default 3s)
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/cgoflags.sh # quiets go-nvml's cgo deprecation warnings
bt="${1:-3s}"
out=$(go test -run '^$' -bench 'SubmitAPI|SubmitBatchAPI|HTTPFloor|EnqueueRaw$|SubmitToStart' -benchtime "$bt" -count 3 ./scheduler/ 2>&1)
echo "$out" | grep -E '^(Benchmark|cpu|goos|goarch|ok|FAIL)'
echo "$out" | awk '
  /^BenchmarkSubmitAPI/   { for (i=1;i<=NF;i++) if ($(i+1)=="submits/s")  { api+=$i; na++ } }
  /^BenchmarkSubmitBatchAPI/ { for (i=1;i<=NF;i++) if ($(i+1)=="submits/s") { bat+=$i; nb++ } }
  /^BenchmarkEnqueueRaw-/ { for (i=1;i<=NF;i++) if ($(i+1)=="enqueues/s") { raw+=$i; nr++ } }
  /^BenchmarkHTTPFloor/   { for (i=1;i<=NF;i++) if ($(i+1)=="requests/s") { fl+=$i; nf++ } }
  /^BenchmarkSubmitToStart/ { for (i=1;i<=NF;i++) if ($(i+1)=="p50-ms") { p50[++np]=$i } }
  END {
    if (na && nr) printf "API single submits/s %.0f vs raw asynq enqueues/s %.0f: ratio %.2fx\n", api/na, raw/nr, (api/na)/(raw/nr)
    if (nb && nr) printf "API batch submits/s (100 specs a request) %.0f: ratio %.2fx of raw enqueues (goal >= 0.5x)\n", bat/nb, (bat/nb)/(raw/nr)
    if (nf && nr) printf "HTTP floor (no-op handler) requests/s %.0f: ratio %.2fx of raw enqueues\n", fl/nf, (fl/nf)/(raw/nr)
    if (np) { s=""; for (i=1;i<=np;i++) s=s " " p50[i]; printf "submit -> trainer cmd.Start p50 (ms) per run:%s (goal <= 20)\n", s }
  }'
