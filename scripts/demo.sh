#!/usr/bin/env bash
# The main job, from nothing, in one command: install what is missing
# (redis-server, python3-torch), build lathed and lathe, start `lathed up`
# (Redis, scheduler and a local worker in one process), submit the demo job
# (configs/examples/tiny-lora.yaml: LoRA on the built-in tiny-char model, on
# the CPU), wait for it, pull its adapter, evaluate it with and without the
# adapter, and stop the daemon.
#
#   scripts/demo.sh                 # everything under ./lathe-demo/
#
# Environment (all optional):
#   LATHE_DEMO_DIR   where the data dir, the daemon's log and the adapter go (default ./lathe-demo)
#   LATHE_BIN_DIR    use lathed and lathe from this folder instead of building them
#   LATHE_DEMO_LISTEN  the API address (default: a free port on 127.0.0.1)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
start=$(date +%s)
say() { echo "demo: $*"; }

"$root/scripts/setup.sh"

dir=${LATHE_DEMO_DIR:-$root/lathe-demo}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

if [ -n "${LATHE_BIN_DIR:-}" ]; then
  bin=$(cd "$LATHE_BIN_DIR" && pwd)
else
  bin=$dir/bin
  say "building lathed and lathe into $bin"
  . "$root/scripts/cgoflags.sh" # quiets go-nvml's cgo deprecation warnings
  go build -o "$bin/" ./cmd/lathed
  CGO_ENABLED=0 go build -o "$bin/" ./cmd/lathe ./cmd/lathe-full # the CLI: its front and the whole client
fi

listen=${LATHE_DEMO_LISTEN:-}
if [ -z "$listen" ]; then
  port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  listen=127.0.0.1:$port
fi
export LATHE_SERVER=http://$listen

log=$dir/lathed.log
say "starting lathed up on $listen (data dir $dir/data, log $log)"
"$bin/lathed" up --listen "$listen" --data-dir "$dir/data" >"$log" 2>&1 &
pid=$!
stop() {
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
}
trap stop EXIT

# Ready when the API answers (at most 60 s; it prints why it stopped if it does).
for _ in $(seq 1 600); do
  if "$bin/lathe" queues >/dev/null 2>&1; then break; fi
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "demo: lathed up exited; its log:" >&2; cat "$log" >&2; exit 1
  fi
  sleep 0.1
done
"$bin/lathe" queues >/dev/null || { echo "demo: the API did not answer within 60 s; log: $log" >&2; exit 1; }

say "submitting configs/examples/tiny-lora.yaml and waiting for it"
job_json=$("$bin/lathe" submit configs/examples/tiny-lora.yaml --wait -o json)
id=$(printf '%s' "$job_json" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
say "job $id succeeded"

rm -rf "$dir/adapter"
"$bin/lathe" pull "$id" --to "$dir/adapter"
say "pulled the adapter into $dir/adapter: $(ls "$dir/adapter" | tr '\n' ' ')"

say "evaluating the adapter on configs/examples/data/tiny-eval.jsonl"
/usr/bin/python3 scripts/eval_adapter.py --adapter "$dir/adapter" \
  --eval-dataset configs/examples/data/tiny-eval.jsonl

stop
trap - EXIT
say "done in $(( $(date +%s) - start )) s; lathed stopped (its log: $log)"
