#!/usr/bin/env bash
# Installs what Lathe needs on this machine when it is missing, from Debian's
# packages, and checks what cannot be installed here. Idempotent: a machine
# that has everything installs nothing.
#
#   scripts/setup.sh          what the demo needs: redis-server, /usr/bin/python3 with torch
#   scripts/setup.sh --test   also what the tests need: docker-compose (the compose
#                             file is checked), promtool (Debian prometheus: /metrics
#                             is checked with promtool check metrics), chromium and chromium-driver
#                             (the dashboard's headless-Chromium test drives them through chromedriver),
#                             moto_server (an AWS emulator: must be preinstalled, PyPI is not reachable
#                             from these machines)
#
# Needs root (or sudo) only when something is missing. Go 1.26 must already
# be on PATH (it is not a Debian package at that version).
set -euo pipefail

want_test=0
[ "${1:-}" = "--test" ] && want_test=1

if ! command -v go >/dev/null 2>&1; then
  echo "setup: go is not on PATH; install Go 1.26 (https://go.dev/dl/) first" >&2
  exit 1
fi

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
/usr/bin/python3 -c 'import torch' >/dev/null 2>&1 || need+=(python3-torch)
if [ "$want_test" = 1 ]; then
  command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
  [ -x /usr/bin/promtool ] || need+=(prometheus)
  [ -x /usr/bin/chromium ] || need+=(chromium)
  [ -x /usr/bin/chromedriver ] || need+=(chromium-driver)
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

if [ "$want_test" = 1 ] && ! command -v moto_server >/dev/null 2>&1; then
  echo "setup: moto_server (pip package moto, an AWS emulator the tests drive aws-sdk-go-v2 against) is not on PATH;" >&2
  echo "setup: install it with 'pip install \"moto[server]\"' where PyPI is reachable; the AWS tests fail without it" >&2
  exit 1
fi
