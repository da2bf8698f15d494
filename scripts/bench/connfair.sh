#!/usr/bin/env bash
# Connection fairness at the scale of the attack that found the hole: 17
# address prefixes (127.0.1.1 … 127.0.17.1) × 256 stalled connections
# (4,352, over the 3,072 the default waiting pool holds) against the real
# API server on loopback with the default caps, and one token holder on an
# 18th prefix: 100 requests each on a new connection made while the pool
# is full, then 200 on one keep-alive connection. Any status but 200 fails
# it; it prints the token holder's p50, p99 and max.
#   scripts/bench/connfair.sh [RUNS]        (default 3)
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/cgoflags.sh
runs=${1:-3}
for i in $(seq "$runs"); do
  echo "run $i ($(uptime | sed 's/.*load average/load average/'))"
  go test -count=1 -run '^$' -bench 'ConnectionFairness17x256' -benchtime 1x -v ./scheduler/ 2>&1 |
    grep -E 'token holder|under attack|after the runs|FAIL|--- ' | sed 's/^ *connlimit_test.go:[0-9]*: /  /'
done
