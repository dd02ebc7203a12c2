#!/usr/bin/env bash
# Writes hack/envtest/{k8s,etcd}/go.mod for the versions in versions.env and
# tidies them. k8s.io/kubernetes requires its staging modules at v0.0.0 and
# points them at local directories with replace lines that do not apply to a
# consumer, so we map each one to its published tag (v1.Y.Z -> v0.Y.Z).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
. "$here/versions.env"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
staging_tag="v0.${K8S_VERSION#v1.}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
gomod=$(cd "$tmp" && go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
{
  echo "module example.invalid/envtest/k8s"
  echo
  grep -E '^go [0-9]' "$gomod"
  grep -E '^godebug ' "$gomod" || echo "godebug default=go1.26"
  echo
  echo "tool ("
  echo "	k8s.io/kubernetes/cmd/kube-apiserver"
  echo "	k8s.io/kubernetes/cmd/kube-controller-manager"
  echo "	k8s.io/kubernetes/cmd/kube-scheduler"
  echo ")"
  echo
  echo "require k8s.io/kubernetes ${K8S_VERSION}"
  echo
  echo "replace ("
  grep -E '^\s+k8s\.io/[a-z0-9-]+ v0\.0\.0$' "$gomod" | awk -v t="$staging_tag" '{print "\t" $1 " => " $1 " " t}'
  echo ")"
} > "$here/k8s/go.mod"
cat > "$here/etcd/go.mod" <<EOM
module example.invalid/envtest/etcd

go 1.26.0

tool go.etcd.io/etcd/server/v3

require go.etcd.io/etcd/server/v3 ${ETCD_VERSION}
EOM
(cd "$here/k8s" && go mod tidy)
(cd "$here/etcd" && go mod tidy)
echo "wrote $here/k8s/go.mod and $here/etcd/go.mod"
