#!/usr/bin/env bash
# Runs every test: formatting, vet, the docker-compose file, and go test
# (with -race on the packages that run goroutines). Needs redis-server,
# /usr/bin/python3 with torch, and docker-compose (.ci/run installs them).
set -euo pipefail
cd "$(dirname "$0")/.."

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
go vet ./...
docker-compose -f docker-compose.yml config -q
go test -race -count=1 -timeout 20m ./...
