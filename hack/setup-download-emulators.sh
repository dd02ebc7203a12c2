#!/usr/bin/env bash
# Install the local emulators used by the download tests (test/download/).
#
#   * Azurite (Azure Blob emulator) from the npm registry into a cache directory
#     outside the git tree: ${KAIWO_NODE_CACHE:-~/.cache/kaiwo-ctrl/node}.
#   * gcp-storage-emulator, moto[server] and awscli come from PyPI through the
#     project's `dev` extra; this script only checks they are present in the venv.
#
# Idempotent: re-running it does nothing when everything is already installed.
# Prints the path of the azurite-blob executable on its last line.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
node_cache="${KAIWO_NODE_CACHE:-${HOME}/.cache/kaiwo-ctrl/node}"
azurite_version="${AZURITE_VERSION:-3.37.0}"
azurite_bin="${node_cache}/node_modules/.bin/azurite-blob"

need() { command -v "$1" >/dev/null 2>&1 || { echo "setup-download-emulators: '$1' not found on PATH" >&2; exit 1; }; }
need node
need npm

mkdir -p "${node_cache}"
installed_version=""
if [[ -f "${node_cache}/node_modules/azurite/package.json" ]]; then
  installed_version="$(node -p "require('${node_cache}/node_modules/azurite/package.json').version" 2>/dev/null || true)"
fi
if [[ -x "${azurite_bin}" && "${installed_version}" == "${azurite_version}" ]]; then
  echo "azurite ${installed_version} already installed in ${node_cache}" >&2
else
  echo "installing azurite@${azurite_version} into ${node_cache}" >&2
  [[ -f "${node_cache}/package.json" ]] || echo '{"name":"kaiwo-ctrl-emulators","private":true}' > "${node_cache}/package.json"
  npm install --prefix "${node_cache}" --no-audit --no-fund --loglevel=error "azurite@${azurite_version}" >&2
fi
[[ -x "${azurite_bin}" ]] || { echo "setup-download-emulators: ${azurite_bin} missing after install" >&2; exit 1; }

py="${repo_root}/.venv/bin/python"
if [[ -x "${py}" ]]; then
  for mod in moto gcp_storage_emulator awscli; do
    "${py}" -c "import ${mod}" 2>/dev/null || {
      echo "setup-download-emulators: python module '${mod}' missing; run: ${repo_root}/.venv/bin/pip install -e '${repo_root}[dev,download]'" >&2
      exit 1
    }
  done
fi

echo "${azurite_bin}"
