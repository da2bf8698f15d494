#!/usr/bin/env bash
# Runs every test from a fresh machine: installs what the tests need when it
# is missing (scripts/setup.sh --test: redis-server, python3-torch,
# docker-compose; checks moto_server), then formatting, vet, the
# docker-compose file, and go test (with -race on the packages that run
# goroutines; then scheduler/sim's four-cluster replays without it).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
. scripts/cgoflags.sh # quiets go-nvml's cgo deprecation warnings

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
go vet ./...
docker-compose -f docker-compose.yml config -q
go test -race -count=1 -timeout 40m ./...
# scheduler/sim's four-cluster replays build without -race (//go:build !race
# in clusters_test.go: one goroutine's CPU work a run, 7× slower under the
# race detector); they run here, every time.
go test -count=1 -timeout 20m -run 'TestSimulateFourClusters' ./scheduler/sim/
