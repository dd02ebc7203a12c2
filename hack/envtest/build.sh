#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok and
# the Kueue, KubeRay and AppWrapper controller managers from Go modules into a
# cache outside the
# repository, and extracts the third-party CRDs (and Kueue's webhook and CRD
# conversion manifests) from the module zips their projects publish.
#
# Idempotent: binaries are keyed by the component versions and go.sum hashes,
# CRDs by the CRD versions, so changing one never rebuilds the other.
# The last line of stdout is the assets directory
# (bin/, kueue-bin/, kuberay-bin/, appwrapper-bin/, crds/, kueue-manifests/,
# kwok-stages.yaml).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
. "$here/versions.env"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-trimpath -mod=readonly"
cache_root="${KAIWO_CTRL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kaiwo-ctrl}/envtest"
bin_stamp=$(printf '%s\n' "$K8S_VERSION" "$ETCD_VERSION" "$KWOK_VERSION" | cat - "$here/k8s/go.sum" "$here/etcd/go.sum" | sha256sum | cut -c1-12)
crd_stamp=$(printf '%s\n' "$KUEUE_VERSION" "$KUBERAY_VERSION" "$APPWRAPPER_VERSION" "$GATEWAY_API_VERSION" "$GATEWAY_API_INFERENCE_EXTENSION_VERSION" "$KWOK_VERSION" referencegrants | sha256sum | cut -c1-12)
kueue_stamp=$(printf '%s\n' "$KUEUE_VERSION" | cat - "$here/kueue/go.sum" | sha256sum | cut -c1-12)
kuberay_stamp=$(printf '%s\n' "$KUBERAY_VERSION" | cat - "$here/kuberay/go.sum" | sha256sum | cut -c1-12)
appwrapper_stamp=$(printf '%s\n' "$APPWRAPPER_VERSION" | cat - "$here/appwrapper/go.sum" | sha256sum | cut -c1-12)
bin="$cache_root/bin-${K8S_VERSION}-${bin_stamp}"
kueue_bin="$cache_root/kueue-${KUEUE_VERSION}-${kueue_stamp}"
kuberay_bin="$cache_root/kuberay-${KUBERAY_VERSION}-${kuberay_stamp}"
appwrapper_bin="$cache_root/appwrapper-${APPWRAPPER_VERSION}-${appwrapper_stamp}"
crds="$cache_root/crds-${crd_stamp}"
assets="$cache_root/assets-${bin_stamp}-${crd_stamp}-${kueue_stamp}-${kuberay_stamp}-${appwrapper_stamp}"
log() { echo "[envtest-build] $*" >&2; }

need_bin=0
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kwok; do
  [ -x "$bin/$b" ] || need_bin=1
done
if [ "$need_bin" = 1 ]; then
  mkdir -p "$bin"
  build_date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  vpkg=k8s.io/component-base/version
  ldflags="-s -w -X $vpkg.gitVersion=${K8S_VERSION} -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=${minor} -X $vpkg.gitTreeState=clean -X $vpkg.buildDate=${build_date} -X $vpkg.gitCommit=module-${K8S_VERSION}"
  t0=$(date +%s)
  if [ ! -x "$bin/etcd" ]; then
    log "building etcd ${ETCD_VERSION}"
    (cd "$here/etcd" && go build -ldflags "-s -w" -o "$bin/etcd.tmp" go.etcd.io/etcd/server/v3) && mv "$bin/etcd.tmp" "$bin/etcd"
  fi
  for c in kube-apiserver kube-controller-manager kube-scheduler; do
    if [ ! -x "$bin/$c" ]; then
      log "building $c ${K8S_VERSION}"
      (cd "$here/k8s" && go build -ldflags "$ldflags" -o "$bin/$c.tmp" "k8s.io/kubernetes/cmd/$c") && mv "$bin/$c.tmp" "$bin/$c"
    fi
  done
  if [ ! -x "$bin/kwok" ]; then
    log "building kwok ${KWOK_VERSION}"
    (cd "$(mktemp -d)" && GOBIN="$bin" GOFLAGS=-trimpath go install -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}")
  fi
  log "binaries built in $(( $(date +%s) - t0 ))s"
fi

if [ ! -x "$kueue_bin/kueue" ]; then
  # sigs.k8s.io/kueue/cmd/kueue through the wrapper module in hack/envtest/kueue
  # (its go.sum is Kueue's own, tidied: see the README there)
  mkdir -p "$kueue_bin"
  log "building kueue ${KUEUE_VERSION} (cold: several minutes on 2 cores)"
  t0=$(date +%s)
  vpkg=sigs.k8s.io/kueue/pkg/version
  (cd "$here/kueue" && go build -ldflags "-s -w -X $vpkg.GitVersion=${KUEUE_VERSION} -X $vpkg.GitCommit=module-${KUEUE_VERSION} -X $vpkg.BuildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
      -o "$kueue_bin/kueue.tmp" sigs.k8s.io/kueue/cmd/kueue) && mv "$kueue_bin/kueue.tmp" "$kueue_bin/kueue"
  log "kueue built in $(( $(date +%s) - t0 ))s"
fi

if [ ! -x "$kuberay_bin/kuberay" ]; then
  # KubeRay's operator (github.com/ray-project/kuberay/ray-operator, package main at
  # the module root) through the wrapper module in hack/envtest/kuberay
  mkdir -p "$kuberay_bin"
  log "building kuberay ${KUBERAY_VERSION} (cold: several minutes on 2 cores)"
  t0=$(date +%s)
  (cd "$here/kuberay" && go build -ldflags "-s -w" -o "$kuberay_bin/kuberay.tmp" github.com/ray-project/kuberay/ray-operator) \
    && mv "$kuberay_bin/kuberay.tmp" "$kuberay_bin/kuberay"
  log "kuberay built in $(( $(date +%s) - t0 ))s"
fi
if [ ! -x "$appwrapper_bin/appwrapper" ]; then
  # AppWrapper's controller (github.com/project-codeflare/appwrapper/cmd) through hack/envtest/appwrapper
  mkdir -p "$appwrapper_bin"
  log "building appwrapper ${APPWRAPPER_VERSION} (cold: several minutes on 2 cores)"
  t0=$(date +%s)
  (cd "$here/appwrapper" && go build -ldflags "-s -w -X main.BuildVersion=${APPWRAPPER_VERSION} -X main.BuildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
      -o "$appwrapper_bin/appwrapper.tmp" github.com/project-codeflare/appwrapper/cmd) \
    && mv "$appwrapper_bin/appwrapper.tmp" "$appwrapper_bin/appwrapper"
  log "appwrapper built in $(( $(date +%s) - t0 ))s"
fi

modir() {
  (cd "$(mktemp -d)" && go mod download -json "$1" | python3 -c '
import json, sys
d = json.load(sys.stdin)
if "Dir" not in d:
    sys.exit("go mod download %s: %s" % (sys.argv[1], d.get("Error")))
print(d["Dir"])' "$1")
}
if [ ! -f "$crds/.done" ]; then
  rm -rf "$crds"; mkdir -p "$crds/crds"
  log "extracting third-party CRDs"
  d=$(modir "sigs.k8s.io/kueue@${KUEUE_VERSION}")
  for k in clusterqueues localqueues resourceflavors workloadpriorityclasses workloads admissionchecks cohorts topologies; do
    cp "$d/config/components/crd/bases/kueue.x-k8s.io_${k}.yaml" "$crds/crds/"
  done
  d=$(modir "github.com/ray-project/kuberay/ray-operator@${KUBERAY_VERSION}")
  for k in rayclusters rayjobs rayservices; do cp "$d/config/crd/bases/ray.io_${k}.yaml" "$crds/crds/"; done
  d=$(modir "github.com/project-codeflare/appwrapper@${APPWRAPPER_VERSION}")
  cp "$d/config/crd/bases/workload.codeflare.dev_appwrappers.yaml" "$crds/crds/"
  d=$(modir "sigs.k8s.io/gateway-api@${GATEWAY_API_VERSION}")
  for k in gatewayclasses gateways httproutes referencegrants; do cp "$d/config/crd/standard/gateway.networking.k8s.io_${k}.yaml" "$crds/crds/"; done
  d=$(modir "sigs.k8s.io/gateway-api-inference-extension@${GATEWAY_API_INFERENCE_EXTENSION_VERSION}")
  cp "$d/config/crd/bases/inference.networking.k8s.io_inferencepools.yaml" "$crds/crds/"
  # kwok's stock "fast" stages: node init + heartbeat, pod ready/complete/delete
  d=$(modir "sigs.k8s.io/kwok@${KWOK_VERSION}")
  : > "$crds/kwok-stages.yaml"
  for s in node/fast/node-initialize node/heartbeat/node-heartbeat pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
    { cat "$d/kustomize/stage/$s.yaml"; echo; echo "---"; } >> "$crds/kwok-stages.yaml"
  done
  chmod -R u+w "$crds"
  touch "$crds/.done"
fi
if [ ! -f "$crds/kueue/.complete" ]; then
  # Kueue's webhook configurations, all its CRDs (it watches some the operator does not
  # use, e.g. MultiKueue's) and the CRD patches that turn on its conversion webhook;
  # kaiwo_ctrl.local.kueue rewrites their service references to loopback URLs
  rm -rf "$crds/kueue"; mkdir -p "$crds/kueue/crd-patches" "$crds/kueue/crds"
  log "extracting Kueue's webhook manifests and CRDs"
  d=$(modir "sigs.k8s.io/kueue@${KUEUE_VERSION}")
  cp "$d/config/components/webhook/manifests.yaml" "$d/config/components/webhook/kustomization.yaml" "$crds/kueue/"
  cp "$d/config/components/crd/kustomization.yaml" "$crds/kueue/crd-kustomization.yaml"
  cp "$d"/config/components/crd/patches/webhook_in_*.yaml "$crds/kueue/crd-patches/"
  cp "$d"/config/components/crd/bases/kueue.x-k8s.io_*.yaml "$crds/kueue/crds/"
  chmod -R u+w "$crds/kueue"
  touch "$crds/kueue/.complete"
fi
mkdir -p "$assets"
ln -sfn "$bin" "$assets/bin"
ln -sfn "$kueue_bin" "$assets/kueue-bin"
ln -sfn "$kuberay_bin" "$assets/kuberay-bin"
ln -sfn "$appwrapper_bin" "$assets/appwrapper-bin"
ln -sfn "$crds/crds" "$assets/crds"
ln -sfn "$crds/kueue" "$assets/kueue-manifests"
ln -sfn "$crds/kwok-stages.yaml" "$assets/kwok-stages.yaml"
echo "$assets"
