#!/usr/bin/env bash
# Installs what Lathe needs on this machine when it is missing, from Debian's
# packages, and checks what cannot be installed here. Idempotent: a machine
# that has everything installs nothing.
#
#   scripts/setup.sh          what the demo needs: redis-server, /usr/bin/python3 with torch
#   scripts/setup.sh --hf     also the Hugging Face path's virtualenv (see below)
#   scripts/setup.sh --test   everything of --hf, and what the tests need: docker-compose (the compose
#                             file is checked), promtool (Debian prometheus: /metrics
#                             is checked with promtool check metrics, the alert rules
#                             with promtool test rules), chromium and chromium-driver
#                             (the dashboard's headless-Chromium test drives them through chromedriver),
#                             tmux (`lathe top` is tested on an 80x24 tmux terminal),
#                             redis-sentinel (the Sentinel failover test runs a primary, a replica
#                             and three sentinels),
#                             slurmctld, slurmd, slurm-client and munge (the Slurm pool's tests start
#                             their own one-host Slurm: munged, slurmctld and slurmd, as root),
#                             iproute2 (`ip netns`: the multi-node test puts two workers in two network namespaces),
#                             etcd-server, and kube-apiserver, kube-controller-manager, kube-scheduler
#                             (k8s.io/kubernetes v1.37.2) and kwok built from the Go module proxy by
#                             scripts/kube-binaries.sh into ${LATHE_KUBE_BIN:-~/.cache/lathe/kube-v1.37.2}
#                             (the Kubernetes pool's tests start their own control plane; about
#                             15 minutes on 2 cores the first time, skipped when built),
#                             moto_server (an AWS emulator: preinstalled here; pip install "moto[server]"),
#                             and llama-cpp-python in the virtualenv (the GGUF tests load the
#                             exports in real llama.cpp; built from source with cmake, once)
#
# The Hugging Face virtualenv: ${LATHE_HF_VENV:-/opt/lathe/hf-venv}, made with
# /usr/bin/python3 -m venv (Debian's python3-venv) and filled from PyPI with
# scripts/python/requirements-hf.txt (every package pinned; torch's Linux
# wheel brings CUDA, about 5.8 GB installed, 1.5 min on a fast link). A stamp
# file in it holds the sha256 of the requirement files it was built from; a
# change rebuilds it. lathed runs the reference trainer there for every
# base_model but tiny-char (worker config python.hf). The lathe_trainer
# package (scripts/python: the contract for a team's own script) is installed
# into it too.
#
# Needs root (or sudo) only when something is missing. Go 1.26 must already
# be on PATH (it is not a Debian package at that version).
set -euo pipefail

want_test=0
want_hf=0
for a in "$@"; do
  case "$a" in
    --test) want_test=1; want_hf=1 ;;
    --hf) want_hf=1 ;;
    *) echo "setup: unknown argument $a (want --hf or --test)" >&2; exit 2 ;;
  esac
done

if ! command -v go >/dev/null 2>&1; then
  echo "setup: go is not on PATH; install Go 1.26 (https://go.dev/dl/) first" >&2
  exit 1
fi

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
/usr/bin/python3 -c 'import torch' >/dev/null 2>&1 || need+=(python3-torch)
if [ "$want_hf" = 1 ]; then
  /usr/bin/python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
fi
if [ "$want_test" = 1 ]; then
  command -v cmake >/dev/null 2>&1 || need+=(cmake)
  command -v g++ >/dev/null 2>&1 || need+=(g++)
fi
if [ "$want_test" = 1 ]; then
  command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
  [ -x /usr/bin/promtool ] || need+=(prometheus)
  [ -x /usr/bin/chromium ] || need+=(chromium)
  [ -x /usr/bin/chromedriver ] || need+=(chromium-driver)
  command -v tmux >/dev/null 2>&1 || need+=(tmux)
  command -v redis-sentinel >/dev/null 2>&1 || need+=(redis-sentinel)
  [ -x /usr/sbin/slurmctld ] || need+=(slurmctld)
  [ -x /usr/sbin/slurmd ] || need+=(slurmd)
  [ -x /usr/bin/sbatch ] || need+=(slurm-client)
  [ -x /usr/sbin/munged ] || need+=(munge)
  command -v ip >/dev/null 2>&1 || need+=(iproute2) # the gang test's network namespaces (ip netns)
  command -v etcd >/dev/null 2>&1 || need+=(etcd-server) # the Kubernetes pool's tests (internal/kubetest)
fi

if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]} (apt-get)"
  sudo=()
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo=(sudo); else
      echo "setup: ${need[*]} missing and not root (no sudo): run as root: apt-get install -y ${need[*]}" >&2
      exit 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq "${need[@]}" >/dev/null
fi

if [ "$want_test" = 1 ]; then
  "$(dirname "$0")/kube-binaries.sh"
fi

if [ "$want_test" = 1 ] && ! command -v moto_server >/dev/null 2>&1; then
  echo "setup: moto_server (pip package moto, an AWS emulator the tests drive aws-sdk-go-v2 against) is not on PATH;" >&2
  echo "setup: install it with 'pip install \"moto[server]\"' where PyPI is reachable; the AWS tests fail without it" >&2
  exit 1
fi

# The Hugging Face virtualenv (--hf, --test).
if [ "$want_hf" = 1 ]; then
  here=$(cd "$(dirname "$0")" && pwd)
  venv=${LATHE_HF_VENV:-/opt/lathe/hf-venv}
  reqs=("$here/python/requirements-hf.txt")
  [ "$want_test" = 1 ] && reqs+=("$here/python/requirements-test.txt")
  stamp=$(cat "${reqs[@]}" | sha256sum | cut -d' ' -f1)
  have=$(cat "$venv/.lathe-requirements" 2>/dev/null || true)
  # A --test venv also serves --hf: its stamp covers both files.
  if [ "$want_test" = 0 ] && [ -n "$have" ] && [ -f "$venv/.lathe-requirements-hf" ] &&
     [ "$(cat "$venv/.lathe-requirements-hf")" = "$(cat "${reqs[0]}" | sha256sum | cut -d' ' -f1)" ]; then
    have=$stamp
  fi
  if [ "$have" != "$stamp" ]; then
    start=$(date +%s)
    echo "setup: building the Hugging Face virtualenv $venv from ${reqs[*]##*/} (PyPI; several GB, minutes)"
    mkdir -p "$(dirname "$venv")"
    [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
    args=()
    for r in "${reqs[@]}"; do args+=(-r "$r"); done
    # llama-cpp-python builds llama.cpp for this CPU's baseline, not -march=native,
    # so a cached wheel also runs on another machine of the kind.
    CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF}" \
      "$venv/bin/pip" install -q --disable-pip-version-check "${args[@]}"
    echo "$stamp" > "$venv/.lathe-requirements"
    cat "${reqs[0]}" | sha256sum | cut -d' ' -f1 > "$venv/.lathe-requirements-hf"
    echo "setup: $venv ready in $(( $(date +%s) - start )) s, $(du -sh "$venv" | cut -f1)"
  fi
  # The lathe_trainer package (scripts/python) installed into the virtualenv,
  # so a team's own script run by {hf_python} imports it; reinstalled when
  # its files change (a copy, not an editable link to this checkout).
  pkg=$(cd "$here/python" && cat pyproject.toml lathe_trainer/*.py | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$venv/.lathe-trainer-pkg" 2>/dev/null || true)" != "$pkg" ]; then
    "$venv/bin/pip" install -q --disable-pip-version-check --no-deps "$here/python" >/dev/null
    echo "$pkg" > "$venv/.lathe-trainer-pkg"
    echo "setup: lathe_trainer installed into $venv"
  fi
fi
