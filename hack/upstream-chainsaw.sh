#!/usr/bin/env bash
# Run upstream Kaiwo's chainsaw tests against kaiwo-ctrl, one test per fresh simulated plane.
#
#   ./hack/upstream-chainsaw.sh [--work DIR] [--env FILE]... [--chainsaw BIN] [--assert-timeout D]
#                               TESTS_DIR [NAME...]
#
# TESTS_DIR is a directory of your checkout of silogen/kaiwo (for example
# ~/src/kaiwo/test/chainsaw/tests/standard, or one test's folder). This script fetches nothing:
# it finds every chainsaw Test under TESTS_DIR (files named chainsaw-test.yaml; upstream's
# skipped files are named otherwise), keeps those whose metadata.name is one of NAME (all when
# none is given) and runs each ALONE against a fresh `./hack/run-local.sh --simulate` plane
# (etcd, kube-apiserver, controller-manager, scheduler, kwok, Kueue, KubeRay, AppWrapper, the
# simulated Ray head, the operator and the samples, among them the KaiwoQueueConfig `kaiwo`
# upstream's tests expect), which it tears down afterwards. So no test sees what another left.
#
# It prints a table: test name, PASS/FAIL, seconds, and for a failure chainsaw's first error.
# Per test, WORK/NN-NAME/ keeps chainsaw.log, run-local.log, operator.log and plane-logs/ (the
# plane's components: kueue, kuberay, kube-controller-manager, ...).
# Exit status: 0 when every selected test passed, 1 otherwise, 2 on usage errors.
#
#   --work DIR          where the planes and logs go (default: a new directory under /tmp)
#   --env FILE          kubectl apply FILE to each plane once the samples reconciled, then wait
#                       for its kwok Nodes to be Ready; repeatable. hack/upstream-chainsaw/
#                       kind-test-env.yaml describes upstream's own test cluster (NVIDIA nodes,
#                       its KaiwoConfig, the rwx-nfs StorageClass); without it the tests see the
#                       plane as run-local.sh makes it
#   --chainsaw BIN      the chainsaw binary (default: $CHAINSAW, then `chainsaw` on PATH, then
#                       ~/.cache/kaiwo-ctrl/chainsaw/chainsaw)
#   --assert-timeout D  chainsaw's default assert timeout (default 90s, as upstream's configs)
#
# Upstream's `catch` blocks call its `kaiwo-dev` debugging tool; where it is missing, that
# step fails after the real failure and is not the cause reported.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

work=""
chainsaw=${CHAINSAW:-}
assert_timeout=90s
envs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --work) work=$2; shift ;;
    --chainsaw) chainsaw=$2; shift ;;
    --env) envs+=("$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"); shift ;;
    --assert-timeout) assert_timeout=$2; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    --*) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
    *) break ;;
  esac
  shift
done
[ $# -ge 1 ] || { echo "usage: $0 [options] TESTS_DIR [NAME...] (see --help)" >&2; exit 2; }
tests_dir=$(cd "$1" && pwd) || exit 2
shift
if [ -z "$chainsaw" ]; then
  chainsaw=$(command -v chainsaw || echo "${XDG_CACHE_HOME:-$HOME/.cache}/kaiwo-ctrl/chainsaw/chainsaw")
fi
[ -x "$chainsaw" ] || { echo "no chainsaw binary at $chainsaw (--chainsaw BIN)" >&2; exit 2; }
[ -n "$work" ] || work=$(mktemp -d /tmp/upstream-chainsaw.XXXXXX)
mkdir -p "$work"
work=$(cd "$work" && pwd)
py=$root/.venv/bin/python
export PATH=$root/.venv/bin:$PATH  # upstream's scripts call kubectl
# this checkout's code, even when the .venv's editable install points at another one; and no
# set-up run (./hack/setup.sh would reinstall the .venv from here)
export PYTHONPATH=$root${PYTHONPATH:+:$PYTHONPATH} RUN_LOCAL_SETUP=0

# "DIR<TAB>NAME" per Test document, in path order, filtered by the names asked for
mapfile -t cases < <("$py" - "$tests_dir" "$@" <<'PY'
import pathlib, sys, yaml
root, wanted = pathlib.Path(sys.argv[1]), set(sys.argv[2:])
for f in sorted(root.rglob("chainsaw-test.yaml")):
    for doc in yaml.safe_load_all(f.read_text()):
        if isinstance(doc, dict) and doc.get("kind") == "Test":
            name = (doc.get("metadata") or {}).get("name", "")
            if not wanted or name in wanted:
                print(f"{f.parent}\t{name}")
PY
)
[ ${#cases[@]} -gt 0 ] || { echo "no chainsaw Test found under $tests_dir${*:+ named $*}" >&2; exit 2; }

say() { printf '[upstream-chainsaw] %s\n' "$*"; }
plane_pid=""
run=""
stop_plane() {
  [ -n "$plane_pid" ] || return 0
  # `local down` removes the plane's directory: keep its components' logs
  cp -r "$run/plane/logs" "$run/plane-logs" 2>/dev/null || true
  kill -TERM "$plane_pid" 2>/dev/null || true  # run-local.sh then stops the operator and the plane
  wait "$plane_pid" 2>/dev/null || true
  plane_pid=""
}
trap stop_plane EXIT
trap 'exit 130' INT TERM

# first_error LOG: chainsaw's first failed operation (step, operation, object) and the first
# line of what it said (after the last line a failed command or script printed), else
# the log's last line
first_error() {
  awk -F'|' '
    /^ *=== (STDOUT|STDERR)/ { inlog = 1; next }
    /\| [0-9:]+ \| / { inlog = 0 }
    /\| RUN +\|/ { said = "" }
    inlog && /[^ ]/ { said = $0; sub(/^ +/, "", said) }
    !op && $0 ~ /\| ERROR +\|/ { gsub(/ +/, " "); op = $4 "|" $5 "|" $7; next }
    op && /^ *(=+ ERROR|-+|\+\+\+|---|[^ ]+\/[^ ]+) *$/ { next }
    op && /[^ ]/ {
      sub(/^ +/, "")
      if (said != "") print op ": " said " (" $0 ")"; else print op ": " $0
      found = 1; exit
    }
    END { if (!found && op) print op }' "$1" | cut -c1-240 | grep . || tail -n 1 "$1" | cut -c1-240
}

sep=$'\x1f'
rows=()
failed=0
n=0
for c in "${cases[@]}"; do
  dir=${c%%$'\t'*}
  name=${c#*$'\t'}
  n=$((n + 1))
  run=$(printf '%s/%02d-%s' "$work" "$n" "$name")
  rm -rf "$run"
  mkdir -p "$run"
  say "$name (${dir#"$tests_dir"/}): starting a fresh simulated plane in $run"
  t0=$(date +%s)
  : >"$run/run-local.log"
  "$root/hack/run-local.sh" --simulate --dir "$run" >"$run/run-local.log" 2>&1 &
  plane_pid=$!
  until grep -q 'samples reconciled' "$run/run-local.log"; do
    if ! kill -0 "$plane_pid" 2>/dev/null; then
      wait "$plane_pid" 2>/dev/null || true
      plane_pid=""
      break
    fi
    sleep 1
  done
  if [ -z "$plane_pid" ]; then
    rows+=("$name${sep}ERROR${sep}$(($(date +%s) - t0))${sep}the plane did not start: see $run/run-local.log")
    failed=1
    continue
  fi
  for e in ${envs[@]+"${envs[@]}"}; do
    kubectl --kubeconfig "$run/plane/kubeconfig" apply -f "$e" >>"$run/run-local.log" 2>&1
  done
  if [ ${#envs[@]} -gt 0 ]; then
    kubectl --kubeconfig "$run/plane/kubeconfig" wait --for=condition=Ready node -l type=kwok --timeout=120s >/dev/null
  fi
  t1=$(date +%s)
  say "$name: plane up after $((t1 - t0))s, running chainsaw"
  if KUBECONFIG=$run/plane/kubeconfig "$chainsaw" test --test-dir "$dir" \
      --include-test-regex "^chainsaw\$/^$(printf '%s' "$name" | sed 's/[.[\*^$()+?{|]/\\&/g')\$" \
      --assert-timeout "$assert_timeout" --no-color >"$run/chainsaw.log" 2>&1 \
      && grep -q -- '- Passed  tests 1$' "$run/chainsaw.log"; then
    rows+=("$name${sep}PASS${sep}$(($(date +%s) - t1))${sep}")
  else
    rows+=("$name${sep}FAIL${sep}$(($(date +%s) - t1))${sep}$(first_error "$run/chainsaw.log")")
    failed=1
  fi
  stop_plane
done

echo
printf '%-50s %-6s %5s  %s\n' TEST RESULT SECS "FIRST ERROR (chainsaw)"
for r in "${rows[@]}"; do
  IFS=$sep read -r name result secs why <<<"$r"
  printf '%-50s %-6s %5s  %s\n' "$name" "$result" "$secs" "$why"
done
echo "logs: $work"
exit "$failed"
