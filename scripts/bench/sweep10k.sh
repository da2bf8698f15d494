#!/usr/bin/env bash
# A 10,000-trial sweep admitted by the real binaries, and what the rest of
# Lathe sees meanwhile: one redis-server, one `lathed scheduler` (API on a
# free port), one `lathed worker` (2 CPU slots, a `sleep` trainer), all
# started here in a temp dir. While the sweep is stored:
#   - Redis's slowest command (SLOWLOG, every command over 1 ms kept);
#   - the API's answer to the POST (curl's time_total);
#   - /healthz every 50 ms (any answer but 200 is counted);
#   - `lathe list` back to back (each call timed; p50, p99, max);
#   - lathed scheduler's peak RSS (VmHWM) against its RSS before;
#   - warnings in the scheduler's and worker's logs (a lost leader lease,
#     a failed heartbeat).
# Then one `lathe sweep cancel`, and the count of trials not ended after it.
#   scripts/bench/sweep10k.sh [TRIALS]        (default 10000)
# Environment: KEEP=1 keeps the temp dir and its logs.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
n=${1:-10000}
for tool in redis-server redis-cli curl jq; do
  command -v "$tool" >/dev/null || { echo "sweep10k: $tool is missing (scripts/setup.sh --test installs it)" >&2; exit 1; }
done
work=$(mktemp -d /tmp/lathe-sweep10k-XXXXXX)
chmod o+x "$work" # a root lathed runs trainers as users of their own: they must reach their folders under it
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  [[ -n ${KEEP:-} ]] && echo "kept $work" >&2 || rm -rf "$work"
}
trap cleanup EXIT
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
ns() { date +%s%N; }

. scripts/cgoflags.sh # quiets go-nvml's cgo deprecation warnings
go build -o "$work/" ./cmd/lathed
CGO_ENABLED=0 go build -o "$work/" ./cmd/lathe ./cmd/lathe-full
cat >"$work/lathe.yaml" <<YAML
trainers:
  sleeper: [/bin/sh, -c, 'exec sleep 3600']
jobs:
  allowed_roots: [$root/configs/examples/data, $work]
YAML
rport=$(freeport)
aport=$(freeport)
export LATHE_SERVER=http://127.0.0.1:$aport
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --maxmemory-policy noeviction \
  --dir "$work" >"$work/redis.log" 2>&1 &
pids+=($!)
until redis-cli -p "$rport" ping >/dev/null 2>&1; do sleep 0.05; done
"$work/lathed" scheduler --config "$work/lathe.yaml" --redis-url "redis://127.0.0.1:$rport" --listen "127.0.0.1:$aport" \
  --data-dir "$work/scheduler" >"$work/scheduler.log" 2>&1 &
sched=$!
pids+=($sched)
until curl -sf "$LATHE_SERVER/healthz" >/dev/null; do sleep 0.05; done
"$work/lathed" worker --config "$work/lathe.yaml" --redis-url "redis://127.0.0.1:$rport" --node node-a \
  --data-dir "$work/node-a" --gpus none --slots 2 >"$work/worker.log" 2>&1 &
pids+=($!)
until redis-cli -p "$rport" --scan --pattern '*node:node-a*' | grep -q .; do sleep 0.05; done

jq -n --argjson n "$n" --arg data "file://$root/configs/examples/data/tiny-train.jsonl" '{
  name: "sweep10k",
  job: {name: "t", base_model: "tiny-char", trainer: "sleeper", dataset: $data, resources: {gpus: 0}, max_runtime: "30m"},
  parameters: {"training.learning_rate": {log_uniform: [0.001, 0.1]}},
  search: {kind: "random", trials: $n, seed: 1},
  max_parallel: 2}' >"$work/sweep.json"

# A warm-up list, then the baseline RSS.
"$work/lathe" list >/dev/null
rss0=$(awk '/^VmRSS/ {print $2}' "/proc/$sched/status")
redis-cli -p "$rport" config set slowlog-log-slower-than 1000 >/dev/null
redis-cli -p "$rport" config set slowlog-max-len 100000 >/dev/null
redis-cli -p "$rport" slowlog reset >/dev/null

touch "$work/probing"
( while [[ -e $work/probing ]]; do
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$LATHE_SERVER/healthz" || echo 000)
    echo "$code" >>"$work/healthz.txt"
    sleep 0.05
  done ) &
pids+=($!)
( while [[ -e $work/probing ]]; do
    t0=$(ns)
    if "$work/lathe" list >/dev/null 2>>"$work/list.err"; then echo $(( ($(ns) - t0) / 1000 )) >>"$work/list_us.txt"; else echo fail >>"$work/list_us.txt"; fi
  done ) &
pids+=($!)
sleep 1 # the probes' own baseline

t0=$(ns)
answer=$(curl -s -w '\n%{http_code} %{time_total}' -H 'Content-Type: application/json' --data-binary @"$work/sweep.json" "$LATHE_SERVER/api/v1/sweeps")
code_time=$(tail -1 <<<"$answer")
body=$(sed '$d' <<<"$answer")
id=$(jq -r .sweep.id <<<"$body")
[[ ${code_time%% *} == 201 && $id == s-* ]] || { echo "submit answered $code_time: ${body:0:2000}" >&2; KEEP=1; exit 1; }
state=$(jq -r .sweep.state <<<"$body")
stored=$(jq -r .sweep.stored <<<"$body")
until [[ $(curl -sf "$LATHE_SERVER/api/v1/sweeps/$id?record_only=true" | jq -r .sweep.state) == running ]]; do sleep 0.05; done
t_stored=$(( ($(ns) - t0) / 1000000 ))
sleep 1 # the probes after it
rm -f "$work/probing"
sleep 0.5
rss_peak=$(awk '/^VmHWM/ {print $2}' "/proc/$sched/status")
slow=$(redis-cli -p "$rport" --json slowlog get 100000)
slow_max_us=$(jq '[.[] | .[2]] | max // 0' <<<"$slow" 2>/dev/null || echo "?")
slow_count=$(jq 'length' <<<"$slow" 2>/dev/null || echo "?")
slow_top=$(jq -r 'sort_by(-.[2]) | .[0:5][] | "  \(.[2]) us: \(.[3][0:5] | join(" "))"' <<<"$slow" 2>/dev/null || echo "?")
slow_over10=$(jq '[.[] | select(.[2] > 10000)] | length' <<<"$slow" 2>/dev/null || echo "?")

t1=$(ns)
"$work/lathe" sweep cancel "$id" >/dev/null
t_cancel=$(( ($(ns) - t1) / 1000000 ))
left=$(curl -sf "$LATHE_SERVER/api/v1/sweeps/$id" |
  jq '[.sweep.counts // {} | to_entries[] | select(.key == "queued" or .key == "paused") | .value] | add // 0')

hz_total=$(wc -l <"$work/healthz.txt")
hz_bad=$(grep -vc '^200$' "$work/healthz.txt" || true)
list_fail=$(grep -c fail "$work/list_us.txt" || true)
read -r list_n list_p50 list_p99 list_max < <(grep -v fail "$work/list_us.txt" | sort -n |
  awk '{a[NR]=$1} END {printf "%d %.1f %.1f %.1f\n", NR, a[int(NR*0.5+0.5)]/1000, a[int(NR*0.99+0.5)]/1000, a[NR]/1000}')
warns=$(grep -hE 'level=(WARN|ERROR)|"level":"(WARN|ERROR)"| WARN | ERROR ' "$work/scheduler.log" "$work/worker.log" |
  grep -vE 'appendonly off|made a new ledger key|API is OPEN|Retry exhausted for task' || true)
lease_lost=$(grep -c 'lost the leader lease' "$work/scheduler.log" || true)
hb_failed=$(grep -c 'heartbeat failed' "$work/worker.log" || true)

cat <<EOF
trials: $n (sweep $id)
API answer: ${code_time#* } s, state $state, $stored of $n stored in it
stored whole (running) after: $t_stored ms
Redis SLOWLOG: $slow_count commands over 1 ms, $slow_over10 over 10 ms; slowest $slow_max_us us; the five slowest:
$slow_top
/healthz: $hz_total probes, $hz_bad not 200
lathe list: $list_n calls, $list_fail failed; p50 $list_p50 ms, p99 $list_p99 ms, max $list_max ms
lathed scheduler RSS: $((rss0 / 1024)) MB before, peak $((rss_peak / 1024)) MB (growth $(((rss_peak - rss0) / 1024)) MB)
leader lease lost: $lease_lost; worker heartbeat failed: $hb_failed
lathe sweep cancel: $t_cancel ms; trials queued or paused after it: $left
EOF
if [[ -n $warns ]]; then echo "warnings:"; head -20 <<<"$warns"; fi
