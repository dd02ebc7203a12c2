#!/usr/bin/env bash
# Try kaiwo-ctrl in one command.
#
#   ./hack/run-local.sh [--simulate] [--once] [--dir DIR]
#
# 1. set-up (./hack/setup.sh: .venv, dev dependencies, control-plane binaries; reused when present)
# 2. a local control plane (kaiwo-ctrl local up: etcd + kube-apiserver + CRDs) in DIR,
#    or, when KUBECONFIG is set, the cluster it points at (no local control plane)
# 3. the operator (kaiwo-ctrl run --kubeconfig ...), logging to DIR/operator.log
# 4. the samples in config/samples, then what the operator made from them
# 5. "samples reconciled" once every sample has a status and its children; then it keeps
#    running until Ctrl-C and tears everything down. --once (or RUN_LOCAL_ONCE=1) exits 0 there.
#
# --simulate also runs kube-controller-manager, kube-scheduler, kwok and the real Kueue controller
# manager (built from its Go module by ./hack/setup.sh): Kueue admits the sample workloads (it
# creates their Workloads, reserves quota in the ClusterQueue the operator wrote and unsuspends
# them), Jobs create Pods that the scheduler (which also serves the kaiwo-scheduler profile the
# operator's pods ask for) binds to the simulated sample Nodes, and kwok runs them. The KaiwoJob
# then goes PENDING -> STARTING -> RUNNING -> COMPLETE and the KaiwoService READY.
# Processes, each logging to DIR/plane/logs/: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kwok, kueue; and the operator (DIR/operator.log).
#
# With KUBECONFIG set (a real cluster), the operator's CRDs are applied from config/crd; Kueue,
# KubeRay and AppWrapper must already be installed there. Only the sample namespace, KaiwoJob
# and KaiwoService are applied (never the simulated Nodes), and the sample KaiwoQueueConfig
# only when the cluster has none yet. They stay in namespace kaiwo-samples afterwards.
#
# RUN_LOCAL_SETUP=0 skips step 1 (the .venv and the control-plane binaries must exist already;
# hack/upstream-chainsaw.sh uses it so a run never reinstalls the shared .venv).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

once=${RUN_LOCAL_ONCE:-0}
simulate=0
dir=${RUN_LOCAL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kaiwo-ctrl/run-local}
timeout=${RUN_LOCAL_TIMEOUT:-300}
while [ $# -gt 0 ]; do
  case "$1" in
    --once) once=1 ;;
    --simulate) simulate=1 ;;
    --dir) dir=$2; shift ;;
    --dir=*) dir=${1#--dir=} ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ "$once" = 1 ] || [ "$once" = true ] && once=1 || once=0

say() { printf '[run-local] %s\n' "$*"; }
t0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - t0 ))s"; }

if [ "${RUN_LOCAL_SETUP:-1}" = 0 ]; then
  say "set-up skipped (RUN_LOCAL_SETUP=0)"
else
  say "set-up (./hack/setup.sh)"
  ./hack/setup.sh
fi
kubectl=$root/.venv/bin/kubectl
kaiwo=$root/.venv/bin/kaiwo-ctrl
py=$root/.venv/bin/python
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

pids=()
local_plane=0
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  if [ ${#pids[@]} -gt 0 ]; then
    say "stopping the operator and helpers"
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do
      for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
      kill -KILL "$p" 2>/dev/null
      wait "$p" 2>/dev/null
    done
  fi
  if [ "$local_plane" = 1 ]; then
    say "stopping the local control plane"
    "$kaiwo" local down --dir "$dir/plane" >/dev/null
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

k() { "$kubectl" --kubeconfig "$kubeconfig" "$@"; }

if [ -n "${KUBECONFIG:-}" ]; then
  kubeconfig=${KUBECONFIG%%:*}
  say "KUBECONFIG is set: using that cluster ($(k config current-context 2>/dev/null || echo '?')), no local control plane"
  k version >/dev/null || { echo "cannot reach the cluster of $kubeconfig" >&2; exit 1; }
  say "applying the operator's CRDs (config/crd)"
  k apply --server-side --force-conflicts -k config/crd >/dev/null
else
  if [ -f "$dir/plane/state.json" ]; then
    say "a previous local control plane is recorded in $dir/plane: stopping it first"
    "$kaiwo" local down --dir "$dir/plane" >/dev/null
  fi
  rm -rf "$dir/plane"
  up_args=(local up --dir "$dir/plane")
  [ "$simulate" = 1 ] && up_args+=(--simulate)
  say "starting a local control plane: kaiwo-ctrl ${up_args[*]}"
  local_plane=1
  if [ "$simulate" = 1 ]; then
    # the same binaries, CRDs and Kueue, with kwok stages in which a Job's Pod runs for a few seconds
    KAIWO_CTRL_ASSETS=$("$py" -m e2e.simcluster assets --dir "$dir/assets") "$kaiwo" "${up_args[@]}"
  else
    "$kaiwo" "${up_args[@]}"
  fi
  kubeconfig=$dir/plane/kubeconfig
  # The cluster's (simulated) Nodes exist before the operator starts: its start-up task
  # discovers the node pools from them.
  k apply -f config/samples/nodes_kwok.yaml
  if [ "$simulate" = 1 ]; then
    say "waiting for kwok to report the simulated Nodes Ready"
    k wait --for=condition=Ready node -l type=kwok --timeout=120s >/dev/null
  fi
fi

ports=$("$py" -c 'from kaiwo_ctrl.local.controlplane import free_port as f; print(f(), f(), f())')
read -r health metrics webhook <<<"$ports"
# the proxy on :8000 when that is free, else on any free port
proxy=${RUN_LOCAL_PROXY_PORT:-$("$py" -c '
import socket
from kaiwo_ctrl.local.controlplane import free_port
with socket.socket() as s:
    try:
        s.bind(("127.0.0.1", 8000)); print(8000)
    except OSError:
        print(free_port())')}
op_args=(run --kubeconfig "$kubeconfig" --log-format console
  --health-probe-bind-address "127.0.0.1:$health" --metrics-bind-address "127.0.0.1:$metrics"
  --proxy-bind-address "127.0.0.1:$proxy" --proxy-gateway-bind-address "127.0.0.1:0")
if [ "$local_plane" = 1 ]; then
  # the local apiserver calls the admission webhooks of this process at 127.0.0.1; their
  # certificate Secret lives in the operator's namespace
  k create namespace kaiwo-system --dry-run=client -o yaml | k apply -f - >/dev/null
  op_args+=(--webhook-bind-address "127.0.0.1:$webhook" --webhook-url-host 127.0.0.1)
fi
say "starting the operator: kaiwo-ctrl ${op_args[*]}"
say "  logs: $dir/operator.log   metrics: http://127.0.0.1:$metrics/metrics   proxy: http://127.0.0.1:$proxy/openai/v1"
# own session: Ctrl-C reaches this script, which then stops the operator (SIGTERM) and the rest in order
setsid "$kaiwo" "${op_args[@]}" >"$dir/operator.log" 2>&1 &
op=$!
pids+=("$op")

operator_alive() {
  kill -0 "$op" 2>/dev/null && return 0
  echo "the operator exited; last lines of $dir/operator.log:" >&2
  tail -n 40 "$dir/operator.log" >&2
  exit 1
}
deadline=$(( $(date +%s) + timeout ))
until "$py" -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:$health/readyz', timeout=2).status != 200)" 2>/dev/null; do
  operator_alive
  [ "$(date +%s)" -lt "$deadline" ] || { echo "the operator did not become ready in ${timeout}s" >&2; tail -n 40 "$dir/operator.log" >&2; exit 1; }
  sleep 0.5
done
say "operator ready ($(elapsed))"

say "applying the samples (config/samples)"
if [ -n "${KUBECONFIG:-}" ]; then
  k apply -f config/samples/namespace.yaml
  if [ -z "$(k get kaiwoqueueconfigs -o name 2>/dev/null)" ]; then
    k apply -f config/samples/kaiwo_v1alpha1_kaiwoqueueconfig.yaml
  fi
  k apply -f config/samples/kaiwo_v1alpha1_kaiwojob.yaml -f config/samples/kaiwo_v1alpha1_kaiwoservice.yaml \
    -f config/samples/kubeai_v1_model.yaml
else
  k apply -k config/samples
fi

ns=kaiwo-samples
# the proxy knows its callers (--proxy-auth kubernetes): a ServiceAccount of the samples'
# namespace, bound to the shipped kaiwo-model-user ClusterRole, calls the sample Model
# (made here, while the samples reconcile, so nothing waits on it later)
k apply -f config/rbac/kaiwo_model_user_role.yaml >/dev/null
k create serviceaccount model-user -n $ns --dry-run=client -o yaml | k apply -f - >/dev/null
k create rolebinding model-user -n $ns --clusterrole=kaiwo-model-user --serviceaccount=$ns:model-user \
  --dry-run=client -o yaml | k apply -f - >/dev/null
token=$(k -n $ns create token model-user --duration=1h)
# has_status KIND NAME: the object has status.status
has_status() { [ -n "$(k get "$1" "$2" ${3:+-n "$3"} -o jsonpath='{.status.status}' 2>/dev/null)" ]; }
# owns KIND NS UID: some KIND in NS has an owner reference to UID
owns() { k get "$1" -n "$2" -o jsonpath='{range .items[*]}{.metadata.ownerReferences[*].uid}{"\n"}{end}' 2>/dev/null | grep -q "$3"; }
# workload_done KIND NAME CHILD-KIND: a status, and a child of CHILD-KIND. On a real cluster an
# ERROR status counts too (e.g. no GPUs of the sample's vendor there: its conditions say why).
workload_done() {
  local uid status
  uid=$(k get "$1" "$2" -n $ns -o jsonpath='{.metadata.uid}' 2>/dev/null) || return 1
  status=$(k get "$1" "$2" -n $ns -o jsonpath='{.status.status}' 2>/dev/null) || return 1
  [ -n "$status" ] || return 1
  if [ -n "${KUBECONFIG:-}" ] && [ "$status" = ERROR ]; then return 0; fi
  owns "$3" $ns "$uid"
}
# model_done: the sample Model has a server Pod (Ready on the simulated cluster); local planes only
model_done() {
  [ -n "${KUBECONFIG:-}" ] && return 0
  local want=all
  [ "$simulate" = 1 ] && want=ready
  [ "$(k get model qwen2-500m-cpu -n $ns -o jsonpath="{.status.replicas.$want}" 2>/dev/null)" = 1 ]
}
reconciled() {
  model_done || return 1
  has_status kaiwoqueueconfig kaiwo || return 1
  k get clusterqueues -o name 2>/dev/null | grep -q . || return 1
  workload_done kaiwojob hello-job jobs || return 1
  workload_done kaiwoservice hello-service deployments || return 1
}
deadline=$(( $(date +%s) + timeout ))
until reconciled; do
  operator_alive
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "the samples were not reconciled within ${timeout}s; current state:" >&2
    k get kaiwojobs,kaiwoservices,kaiwoqueueconfigs,jobs,deployments,models,pods -A >&2 || true
    tail -n 40 "$dir/operator.log" >&2
    exit 1
  fi
  sleep 0.5
done

echo
k get kaiwoqueueconfigs,clusterqueues,resourceflavors,localqueues,workloads.kueue.x-k8s.io,kaiwojobs,kaiwoservices,jobs,deployments,models -A
k get pods -n $ns -l app=model -o wide
echo
say "samples reconciled ($(elapsed) after start)"
say "OpenAI-compatible proxy: http://127.0.0.1:$proxy/openai/v1"
say "  TOKEN=\$($kubectl --kubeconfig $kubeconfig -n $ns create token model-user)"
say "  curl -H \"Authorization: Bearer \$TOKEN\" http://127.0.0.1:$proxy/openai/v1/models"
KAIWO_TOKEN=$token "$py" - "http://127.0.0.1:$proxy/openai/v1/models" <<'PY'
import os, sys, time, urllib.request
req = urllib.request.Request(sys.argv[1], headers={"Authorization": "Bearer " + os.environ["KAIWO_TOKEN"]})
for _ in range(40):  # the Model cache (and the new RoleBinding) may be a moment behind the apply
    try:
        body = urllib.request.urlopen(req, timeout=5).read().decode()
    except urllib.error.HTTPError as e:  # 404 until the operator's caches see the Model
        body = f"{e.code}: {e.read().decode()}"
    if "qwen2-500m-cpu" in body:
        break
    time.sleep(0.25)
print(body)
PY

if [ "$once" = 1 ]; then
  exit 0
fi
cat <<EOF

The operator keeps running. In another terminal:
  export KUBECONFIG=$kubeconfig
  $kubectl get kaiwojobs,kaiwoservices -A -w
  $kubectl describe kaiwojob hello-job -n kaiwo-samples
Operator log: $dir/operator.log
Press Ctrl-C to stop the operator$([ "$local_plane" = 1 ] && echo " and the local control plane").
EOF
if [ "$simulate" = 1 ]; then
  # show the sample workloads moving on
  last=""
  while operator_alive; do
    now=$(k get kaiwojobs,kaiwoservices -n $ns --no-headers -o custom-columns=KIND:.kind,NAME:.metadata.name,STATUS:.status.status 2>/dev/null | tr -s ' ' | paste -sd ';' -)
    if [ "$now" != "$last" ]; then say "status: $now"; last=$now; fi
    sleep 1
  done
else
  wait "$op"
fi
