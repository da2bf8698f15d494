#!/usr/bin/env bash
# Builds the Kubernetes binaries the Kubernetes pool's tests run
# (internal/kubetest) into ${LATHE_KUBE_BIN:-$HOME/.cache/lathe/kube-v1.37.2}:
# kube-apiserver, kube-controller-manager and kube-scheduler from
# k8s.io/kubernetes v1.37.2, and kwok from sigs.k8s.io/kwok v0.8.0, all from
# the Go module proxy. Each is built in a throwaway module of its own in a
# temporary folder (k8s.io/kubernetes needs replace lines for its staging
# modules, k8s.io/* v0.0.0, which are set to v0.37.2 here). Idempotent: a
# binary already there is not built again. etcd comes from Debian
# (etcd-server, scripts/setup.sh --test). Takes about 15 minutes on 2 cores
# the first time, and about 1.5 GB of module cache.
set -euo pipefail

k8s_version=v1.37.2
staging_version=v0.37.2
kwok_version=v0.8.0
bin=${LATHE_KUBE_BIN:-$HOME/.cache/lathe/kube-$k8s_version}
mkdir -p "$bin"

missing=()
for b in kube-apiserver kube-controller-manager kube-scheduler; do
  [ -x "$bin/$b" ] || missing+=("k8s.io/kubernetes/cmd/$b")
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export GOFLAGS=-mod=mod

if [ ${#missing[@]} -gt 0 ]; then
  echo "kube-binaries: building ${missing[*]} ($k8s_version) into $bin"
  mkdir -p "$tmp/k8s" && cd "$tmp/k8s"
  printf 'module lathe.local/kubebuild\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes %s\n' "$k8s_version" > go.mod
  kmod=$(go mod download -json "k8s.io/kubernetes@$k8s_version" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
  {
    echo "replace ("
    grep -E '^\s*k8s\.io/[a-z0-9-]+ v0\.0\.0$' "$kmod" | awk -v v="$staging_version" '{print "\t" $1 " => " $1 " " v}'
    echo ")"
  } >> go.mod
  { echo '//go:build tools'; echo; echo 'package tools'; echo; echo 'import ('
    for m in "${missing[@]}"; do echo "	_ \"$m\""; done; echo ')'; } > tools.go
  go mod tidy
  go build -trimpath -o "$bin/" "${missing[@]}"
fi

if [ ! -x "$bin/kwok" ]; then
  echo "kube-binaries: building kwok ($kwok_version) into $bin"
  mkdir -p "$tmp/kwok" && cd "$tmp/kwok"
  printf 'module lathe.local/kwokbuild\n\ngo 1.26.0\n\nrequire sigs.k8s.io/kwok %s\n' "$kwok_version" > go.mod
  printf '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/kwok/cmd/kwok"\n' > tools.go
  go mod tidy
  go build -trimpath -o "$bin/kwok" sigs.k8s.io/kwok/cmd/kwok
fi
echo "kube-binaries: $bin has kube-apiserver, kube-controller-manager, kube-scheduler and kwok"
