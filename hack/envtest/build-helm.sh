#!/usr/bin/env bash
# Builds helm (helm.sh/helm/v3/cmd/helm at HELM_VERSION from versions.env) from
# its Go module into the cache beside the control-plane binaries, for the chart
# tests (helm lint / helm template) and the helm e2e test. Never committed.
#
# Idempotent: the binary is keyed by the version. The last line of stdout is
# the path of the helm binary.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
. "$here/versions.env"
export GOTOOLCHAIN=local CGO_ENABLED=0
cache_root="${KAIWO_CTRL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kaiwo-ctrl}/envtest"
dir="$cache_root/helm-${HELM_VERSION}-2"  # -2: with the Kubernetes version set
if [ ! -x "$dir/helm" ]; then
  mkdir -p "$dir"
  echo "[build-helm] building helm ${HELM_VERSION}" >&2
  t0=$(date +%s)
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  vpkg=helm.sh/helm/v3/internal/version
  # the Kubernetes version helm template/lint assume (as helm's Makefile sets it): that of its client-go
  kmin=$(cd "$tmp" && go mod download -json "helm.sh/helm/v3@${HELM_VERSION}" | python3 -c '
import json, re, sys
gomod = open(json.load(sys.stdin)["GoMod"]).read()
print(re.search(r"k8s.io/client-go v0\.(\d+)\.", gomod).group(1))')
  kv="-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=${kmin}"
  kv="$kv -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=${kmin}"
  # go install pkg@version builds with helm's own go.mod and go.sum (checked by the sum database)
  (cd "$tmp" && GOBIN="$tmp" GOFLAGS=-trimpath go install \
      -ldflags "-s -w -X $vpkg.version=${HELM_VERSION} -X $vpkg.metadata= -X $vpkg.gitTreeState=clean $kv" \
      "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}")
  mv "$tmp/helm" "$dir/helm"
  echo "[build-helm] helm built in $(( $(date +%s) - t0 ))s" >&2
fi
echo "$dir/helm"
