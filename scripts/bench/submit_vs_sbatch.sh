#!/usr/bin/env bash
# `lathe submit` against Slurm's `sbatch`, side by side in one run, one spec
# a call from a shell loop, as a user submits from a script:
#   - N `sbatch --hold --wrap true` (held: slurmctld stores the job and
#     schedules nothing, so sbatch's figure is the submit alone) against a
#     one-host Slurm (munged, slurmctld, slurmd) started here from a
#     slurm.conf in a temp dir;
#   - N `lathe submit SPEC` against a `lathed up` (its own redis-server, a
#     temp data dir) whose one CPU slot runs a `sleep` trainer: the first job
#     sleeps, the rest queue, so no training competes for the cores;
#   - the same N jobs as `lathe submit` of 100 spec files a call (one batch
#     request each: how a script that has its specs at hand submits);
#   - CALLS `lathe --help` and CALLS `sbatch --version`, and CALLS `/bin/true`
#     (the shell's fork+exec floor); with lathe-full beside lathe, CALLS
#     `lathe version` (handed to lathe-full) and CALLS `lathe-full version`.
# ROUNDS rounds, the order swapped every round; the table gives each
# figure's median over the rounds and the ratio of the medians.
#   scripts/bench/submit_vs_sbatch.sh [N] [ROUNDS]     (default 300 submits, 3 rounds)
# Environment: CALLS (default 200); LATHE_BIN_DIR (take lathe and lathed from
# there instead of building them); LATHE_BEFORE=path (also measure that
# lathe binary, an older build, in the same rounds); KEEP=1 (keep the temp
# dir and its logs). Installs slurm-client, slurmctld, slurmd and munge
# with apt-get when sbatch, slurmctld, slurmd or munged is missing (root).
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-300}
rounds=${2:-3}
calls=${CALLS:-200}

if ! command -v sbatch >/dev/null || ! command -v slurmctld >/dev/null ||
  ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
  echo "installing slurm-client slurmctld slurmd munge (apt-get)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y slurm-client slurmctld slurmd munge >/dev/null
fi

work=$(mktemp -d /tmp/lathe-sbatch-XXXXXX)
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
# wait_for DESC CMD...: retries CMD for up to 30 s.
wait_for() {
  local desc=$1; shift
  for _ in $(seq 300); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "$desc did not come up; logs in $work (KEEP=1 keeps them)" >&2
  KEEP=1
  return 1
}

# --- Lathe ---------------------------------------------------------------
mkdir -p "$work/bin"
if [[ -n ${LATHE_BIN_DIR:-} ]]; then
  cp "$LATHE_BIN_DIR/lathe" "$LATHE_BIN_DIR/lathed" "$work/bin/"
  # lathe-full beside lathe, when this build has one (the CLI's front hands
  # it every command but --help and a plain submit)
  [[ -e $LATHE_BIN_DIR/lathe-full ]] && cp "$LATHE_BIN_DIR/lathe-full" "$work/bin/"
else
  . scripts/cgoflags.sh # quiets go-nvml's cgo deprecation warnings
  go build -o "$work/bin/" ./cmd/lathed
  CGO_ENABLED=0 go build -o "$work/bin/" ./cmd/lathe ./cmd/lathe-full # the CLI as it ships: static
fi
lathe=$work/bin/lathe
mkdir -p "$work/spec/data"
cp configs/examples/data/tiny-train.jsonl "$work/spec/data/"
cat >"$work/spec/bench.yaml" <<'YAML'
# A tiny valid job: the sleeper trainer of the benchmark's config.
name: bench
base_model: tiny-char
trainer: sleeper
dataset: data/tiny-train.jsonl
output: {uri: out}
resources: {gpus: 0}
max_runtime: 10m
YAML
cat >"$work/lathe.yaml" <<YAML
trainers:
  sleeper: [/bin/sh, -c, 'exec sleep 3600']
jobs:
  allowed_roots: [$work/spec]
YAML
lport=$(freeport)
export LATHE_SERVER=http://127.0.0.1:$lport
"$work/bin/lathed" up --listen "127.0.0.1:$lport" --data-dir "$work/lathe-data" --config "$work/lathe.yaml" \
  --gpus none --slots 1 --log-level warn >"$work/lathed.log" 2>&1 &
pids+=($!)
wait_for "lathed up" curl -sf "$LATHE_SERVER/healthz"

# --- Slurm (one host) ----------------------------------------------------
host=$(hostname -s)
me=$(id -un)
mkdir -p "$work/munge" "$work/slurm/state" "$work/slurm/spool"
chmod 700 "$work/munge"
head -c 1024 /dev/urandom >"$work/munge/munge.key"
chmod 400 "$work/munge/munge.key"
munged --foreground --force --socket="$work/munge/munge.socket" --key-file="$work/munge/munge.key" \
  --pid-file="$work/munge/munged.pid" --log-file="$work/munge/munged.log" --seed-file="$work/munge/munged.seed" \
  >/dev/null 2>&1 &
pids+=($!)
wait_for munged test -S "$work/munge/munge.socket"
cport=$(freeport)
dport=$(freeport)
export SLURM_CONF=$work/slurm/slurm.conf
cat >"$SLURM_CONF" <<CONF
ClusterName=bench
SlurmctldHost=$host(127.0.0.1)
SlurmUser=$me
SlurmctldPort=$cport
SlurmdPort=$dport
AuthType=auth/munge
AuthInfo=socket=$work/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$work/slurm/state
SlurmdSpoolDir=$work/slurm/spool
SlurmctldPidFile=$work/slurm/slurmctld.pid
SlurmdPidFile=$work/slurm/slurmd.pid
SlurmctldLogFile=$work/slurm/slurmctld.log
SlurmdLogFile=$work/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
MaxJobCount=100000
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=bench Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
slurmctld -D -i -f "$SLURM_CONF" >"$work/slurm/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" >"$work/slurm/slurmd.out" 2>&1 &
pids+=($!)
wait_for slurmctld scontrol ping
mkdir -p "$work/cwd"
cd "$work/cwd" # sbatch's working directory (held jobs write nothing there)

# --- Measures --------------------------------------------------------------
# Each prints one figure: submits/s, or milliseconds per call.
ns() { date +%s%N; }
rate() { awk -v n="$1" -v d="$2" 'BEGIN { printf "%.1f", n / (d / 1e9) }'; }
permil() { awk -v n="$1" -v d="$2" 'BEGIN { printf "%.3f", d / 1e6 / n }'; }
submit_lathe() { # BIN
  local t0 i
  t0=$(ns)
  for ((i = 0; i < n; i++)); do
    "$1" submit "$work/spec/bench.yaml" >/dev/null || { echo "lathe submit failed" >&2; return 1; }
  done
  rate "$n" $(($(ns) - t0))
}
submit_lathe_batch() { # BIN: the same N jobs, 100 spec files a call (one batch request each)
  local t0 i k files
  t0=$(ns)
  for ((i = 0; i < n; i += 100)); do
    files=()
    for ((k = i; k < n && k < i + 100; k++)); do files+=("$work/spec/bench.yaml"); done
    "$1" submit "${files[@]}" >/dev/null || { echo "lathe submit (batch) failed" >&2; return 1; }
  done
  rate "$n" $(($(ns) - t0))
}
submit_sbatch() {
  local t0 i
  t0=$(ns)
  for ((i = 0; i < n; i++)); do
    sbatch --hold --wrap true >/dev/null || { echo "sbatch failed" >&2; return 1; }
  done
  rate "$n" $(($(ns) - t0))
}
per_call() { # CMD...: ms per call over CALLS calls
  local t0 i
  t0=$(ns)
  for ((i = 0; i < calls; i++)); do "$@" >/dev/null; done
  permil "$calls" $(($(ns) - t0))
}
names=(sbatch lathe lathe_batch help version true)
# With the CLI's front (lathe hands lathe-full what it does not do itself):
# what a handed-over command costs, `lathe version` against `lathe-full version`.
full=$work/bin/lathe-full
[[ -e $full ]] && names+=(handover fullver)
[[ -n ${LATHE_BEFORE:-} ]] && names+=(lathe_before help_before)
declare -A fig
measure() { # NAME
  case $1 in
    sbatch) submit_sbatch ;;
    lathe) submit_lathe "$lathe" ;;
    lathe_batch) submit_lathe_batch "$lathe" ;;
    lathe_before) submit_lathe "$LATHE_BEFORE" ;;
    help) per_call "$lathe" --help ;;
    help_before) per_call "$LATHE_BEFORE" --help ;;
    version) per_call sbatch --version ;;
    handover) per_call "$lathe" version ;;
    fullver) per_call "$full" version ;;
    true) per_call /bin/true ;;
  esac
}
# place_stats prints lathed's placement rounds so far: their count and seconds.
place_stats() {
  curl -sf "$LATHE_SERVER/metrics" | awk '
    /^lathe_placement_round_duration_seconds_count/ { c = $2 }
    /^lathe_placement_round_duration_seconds_sum/ { s = $2 }
    END { print c + 0, s + 0 }'
}
place_rounds=0 place_s=0 submit_s=0
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "N=$n submits, CALLS=$calls calls, ROUNDS=$rounds; $(sbatch --version); lathe $("$lathe" --version)"
for ((r = 1; r <= rounds; r++)); do
  order=("${names[@]}")
  if ((r % 2 == 0)); then # reverse the order every other round
    order=()
    for ((k = ${#names[@]} - 1; k >= 0; k--)); do order+=("${names[k]}"); done
  fi
  line="round $r:"
  for name in "${order[@]}"; do
    [[ $name == lathe || $name == lathe_before ]] && place_before=$(place_stats)
    v=$(measure "$name")
    if [[ $name == lathe || $name == lathe_before ]]; then
      read -r c0 s0 <<<"$place_before"
      read -r c1 s1 <<<"$(place_stats)"
      place_rounds=$((place_rounds + c1 - c0))
      place_s=$(awk -v a="$place_s" -v x="$s0" -v y="$s1" 'BEGIN { printf "%.3f", a + y - x }')
      submit_s=$(awk -v a="$submit_s" -v r="$v" -v n="$n" 'BEGIN { printf "%.3f", a + n / r }')
    fi
    fig[$name]+="$v "
    line+=" $name=$v"
  done
  echo "$line"
done

median() { tr ' ' '\n' | grep . | sort -g | awk '{ a[NR] = $1 } END { printf "%.4g\n", (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
med() { echo "${fig[$1]}" | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
echo
printf '| %-34s | %-30s | %-22s | %s\n' measure "median (per round)" "vs the baseline" goal
printf '|%s|%s|%s|%s\n' "$(printf -- '-%.0s' {1..36})" "$(printf -- '-%.0s' {1..32})" "$(printf -- '-%.0s' {1..24})" "------"
printf '| %-34s | %-30s | %-22s | %s\n' "sbatch --hold --wrap true, /s" "$(med sbatch) (${fig[sbatch]% })" "baseline" ""
printf '| %-34s | %-30s | %-22s | %s\n' "lathe submit SPEC, /s" "$(med lathe) (${fig[lathe]% })" "$(ratio "$(med lathe)" "$(med sbatch)") of sbatch" ">= 1.0x"
printf '| %-34s | %-30s | %-22s | %s\n' "lathe submit 100 SPECs a call, /s" "$(med lathe_batch) (${fig[lathe_batch]% })" "$(ratio "$(med lathe_batch)" "$(med sbatch)") of sbatch" ""
[[ -n ${LATHE_BEFORE:-} ]] &&
  printf '| %-34s | %-30s | %-22s | %s\n' "lathe submit, LATHE_BEFORE, /s" "$(med lathe_before) (${fig[lathe_before]% })" "$(ratio "$(med lathe_before)" "$(med sbatch)") of sbatch" ""
printf '| %-34s | %-30s | %-22s | %s\n' "sbatch --version, ms" "$(med version) (${fig[version]% })" "baseline" ""
printf '| %-34s | %-30s | %-22s | %s\n' "lathe --help, ms" "$(med help) (${fig[help]% })" "$(ratio "$(med help)" "$(med version)") of sbatch's" "<= 2 ms"
[[ -n ${LATHE_BEFORE:-} ]] &&
  printf '| %-34s | %-30s | %-22s | %s\n' "lathe --help, LATHE_BEFORE, ms" "$(med help_before) (${fig[help_before]% })" "$(ratio "$(med help_before)" "$(med version)") of sbatch's" ""
[[ -e $full ]] &&
  printf '| %-34s | %-30s | %-22s | %s\n' "lathe version (handed over), ms" "$(med handover) (${fig[handover]% })" "$(ratio "$(med handover)" "$(med fullver)") of lathe-full's" "" &&
  printf '| %-34s | %-30s | %-22s | %s\n' "lathe-full version, ms" "$(med fullver) (${fig[fullver]% })" "baseline" ""
printf '| %-34s | %-30s | %-22s | %s\n' "/bin/true (fork+exec floor), ms" "$(med true) (${fig[true]% })" "" ""
echo
echo "lathe: $("$lathe" queues | grep -m1 'queued:' | tr -s ' ')"
echo "lathed: $place_rounds placement rounds, $place_s s of them, during the $submit_s s of lathe submit loops"
echo "slurm: $(squeue -h -t PD | wc -l) jobs pending (held)"
