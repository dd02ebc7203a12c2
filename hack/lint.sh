#!/usr/bin/env bash
# Static checks, configured in pyproject.toml; ./hack/test.sh runs this before pytest.
#   ruff:         import/statement/syntax errors, pyflakes, justified blind excepts, stale noqa
#   mypy:         types of the kaiwo_ctrl and api packages (non-strict; no unused type: ignore)
#   lint-imports: the layering contracts (runtime knows no domain, controllers stay private
#                 to their package, no cycles between the packages of kaiwo_ctrl)
# Needs the dev extras in .venv (./hack/setup.sh). Stops at the first failing tool.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bin=.venv/bin
step() { echo "[lint] $*"; }

t0=$(date +%s)
step "ruff check: style and bug rules over the whole tree"
"$bin/ruff" check --quiet .
step "mypy: types of kaiwo_ctrl and api"
"$bin/mypy" --no-error-summary
step "lint-imports: layering contracts"
# the contract lines and any broken-contract details, without the banner
"$bin/lint-imports" --no-cache --no-logo \
  | sed -n -e '/ KEPT/p' -e '/ BROKEN/p' -e '/^Contracts:/p' -e '/^Broken contracts/,$p'
step "passed in $(( $(date +%s) - t0 ))s"
