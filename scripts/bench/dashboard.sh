#!/usr/bin/env bash
# The dashboard's JSON endpoints and a /metrics scrape against the real
# `lathed scheduler` over a real redis-server holding 100,000 jobs (issue
# #14): p50/p99 per endpoint and their ratio to the floor (GET /healthz on
# the same process), the Redis commands and round trips of each, and the
# scheduler's VmRSS/VmHWM. Seeding takes ~2 minutes on 2 cores.
#   scripts/bench/dashboard.sh [runs]         (default 1)
# Env: LATHE_BENCH_FINISHED (97800), LATHE_BENCH_REQUESTS (200 per endpoint),
#      LATHE_BENCH_LATHED (time another lathed build, e.g. an older commit's),
#      LATHE_BENCH_COUNTED (20 requests each counted in process for the Redis calls).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/cgoflags.sh # quiets go-nvml's cgo deprecation warnings
exec go test -run '^$' -bench 'Dashboard100k' -benchtime 1x -count "${1:-1}" -timeout 60m ./cmd/lathed/
