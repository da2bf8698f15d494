#!/usr/bin/env bash
# How long a worker's death costs (issue #11): builds lathed, runs a real
# redis-server, `lathed scheduler` and `lathed worker` with the default
# leases (worker.lease_ttl 30s, scheduler.reap_grace 5s, heartbeat_ttl 15s),
# submits JOBS jobs of a /bin/sh stand-in trainer (a step every 100 ms, not
# the reference trainer: what is measured is placement, not training), and
# kill -9s the worker while they run. Two cases:
#   restart  the worker is started again at once on the same node
#   vanish   the node never comes back; a second node (node-b) is live
# Each prints the seconds from the kill until every job is running again
# (state running, attempt 2, claimed by a worker), measured by polling the
# API every 100 ms.
#   scripts/bench/recovery.sh [JOBS] [ROUNDS]     (default 2 jobs, 3 rounds)
# LATHED=path uses that lathed binary instead of building one (to compare
# with an older build); LIMIT=seconds bounds each wait (default 300);
# CASES="restart" or "vanish" runs one case.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/cgoflags.sh # quiets go-nvml's cgo deprecation warnings
root=$(pwd)
jobs=${1:-2}
rounds=${2:-3}
work=$(mktemp -d /tmp/lathe-recovery-XXXXXX)
chmod o+x "$work" # a root lathed runs trainers as users of their own: they must reach their folders under it
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [[ -n ${KEEP:-} ]] && echo "kept $work" || rm -rf "$work"
}
trap cleanup EXIT
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

if [[ -n ${LATHED:-} ]]; then cp "$LATHED" "$work/lathed"; else go build -o "$work/lathed" ./cmd/lathed; fi
cat > "$work/sleeper.sh" <<'SH'
#!/bin/sh
i=0
while [ $i -lt 3000 ]; do
  i=$((i+1))
  echo "{\"event\":\"progress\",\"step\":$i,\"total_steps\":3000,\"loss\":1.0}"
  sleep 0.1
done
echo '{"event":"done","metrics":{"train_loss":1.0}}'
SH
cat > "$work/lathe.yaml" <<YAML
trainers:
  sleeper: [/bin/sh, $work/sleeper.sh]
jobs:
  allowed_roots: [$work, $root]
YAML

now() { date +%s.%N; }
# all_running ATTEMPT NODE: every submitted job is running ATTEMPT (on NODE when not "").
all_running() {
  local id
  for id in "${ids[@]}"; do
    curl -sf "$api/api/v1/jobs/$id" | jq -e --argjson a "$1" --arg n "$2" \
      '.state == "running" and .attempt == $a and ($n == "" or .node == $n)' >/dev/null || return 1
  done
}
wait_running() { # ATTEMPT NODE LIMIT_S
  local deadline=$(( $(date +%s) + $3 ))
  until all_running "$1" "$2"; do
    if (( $(date +%s) > deadline )); then echo "jobs not running attempt $1 on '$2' within $3 s" >&2; return 1; fi
    sleep 0.1
  done
}
worker() { # NODE
  "$work/lathed" worker --config "$work/lathe.yaml" --redis-url "redis://127.0.0.1:$rport" --node "$1" \
    --data-dir "$work/run/$1" --gpus none --slots "$jobs" >>"$work/run/$1.log" 2>&1 &
  echo $!
}

run_case() { # restart|vanish
  rm -rf "$work/run"; mkdir -p "$work/run"
  rport=$(freeport); aport=$(freeport); api="http://127.0.0.1:$aport"
  redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --maxmemory-policy noeviction \
    --dir "$work/run" >"$work/run/redis.log" 2>&1 &
  local redis=$!; pids+=("$redis")
  until redis-cli -p "$rport" ping >/dev/null 2>&1; do sleep 0.05; done
  "$work/lathed" scheduler --config "$work/lathe.yaml" --redis-url "redis://127.0.0.1:$rport" --listen "127.0.0.1:$aport" \
    --data-dir "$work/run/scheduler" >"$work/run/scheduler.log" 2>&1 &
  local sched=$!; pids+=("$sched")
  until curl -sf "$api/healthz" >/dev/null; do sleep 0.05; done
  local a; a=$(worker node-a); pids+=("$a")
  ids=()
  local i
  for ((i = 0; i < jobs; i++)); do
    ids+=("$(curl -sf -H 'Content-Type: application/json' "$api/api/v1/jobs" -d "{\"name\":\"recover-$i\",\"base_model\":\"tiny-char\",\"trainer\":\"sleeper\",\"dataset\":\"file://$root/configs/examples/data/tiny-train.jsonl\",\"resources\":{\"gpus\":0},\"max_runtime\":\"30m\"}" | jq -r .id)")
  done
  wait_running 1 node-a 60
  sleep 2 # a few lease renewals, as a job well under way would have
  local node=node-a b=""
  if [[ $1 == vanish ]]; then
    b=$(worker node-b); pids+=("$b"); node=node-b
    until redis-cli -p "$rport" exists lathe:node:node-b | grep -q 1; do sleep 0.05; done
  fi
  kill -9 "$a"
  local t0; t0=$(now)
  if [[ $1 == restart ]]; then
    wait "$a" 2>/dev/null || true
    a=$(worker node-a); pids+=("$a")
  fi
  wait_running 2 "$node" ${LIMIT:-300}
  local t1; t1=$(now)
  printf '%-8s %d jobs: %.1f s from kill -9 to every job running again\n' "$1" "$jobs" "$(echo "$t1 - $t0" | bc)"
  kill -9 "$a" "$sched" "$redis" $b 2>/dev/null || true
  wait 2>/dev/null || true
}

for ((r = 1; r <= rounds; r++)); do
  for c in ${CASES:-restart vanish}; do run_case "$c"; done
done
