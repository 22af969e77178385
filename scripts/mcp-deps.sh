#!/usr/bin/env bash
# Installs what the MCP gateway's slow tests need, from the project's own pins (issues 14, 24):
#  - reference MCP servers (npm) into .amends-mcp/node: filesystem, memory (knowledge graph) and
#    everything (every protocol feature), and the official conformance suite (0.1.9: later
#    versions need Node 22's fs.globSync, Debian's nodejs is 20)
#  - the git MCP server (PyPI mcp-server-git, an mcp 1.x server) in its own venv (.amends-mcp/git)
#  - an mcp 1.x client in its own venv (.amends-mcp/mcp1), since amends[mcp] needs mcp 2.x
# Idempotent: does nothing when everything is already there. Needs node/npm, python3 and git.
set -euo pipefail
cd "$(dirname "$0")/.."
FS_VERSION=2026.8.31
MEMORY_VERSION=2026.8.31
EVERYTHING_VERSION=2026.8.31
CONFORMANCE_VERSION=0.1.9
GIT_SERVER_VERSION=2026.10.19
MCP1_SPEC='mcp>=1.20,<2'
root=.amends-mcp
mkdir -p "$root"
npm_pkgs=(
  "@modelcontextprotocol/server-filesystem@$FS_VERSION"
  "@modelcontextprotocol/server-memory@$MEMORY_VERSION"
  "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION"
  "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION"
)
have_npm_pkgs() {
  local spec name version
  for spec in "${npm_pkgs[@]}"; do
    name=${spec%@*}
    version=${spec##*@}
    grep -q "\"version\": \"$version\"" "$root/node/node_modules/$name/package.json" 2>/dev/null \
      || return 1
  done
}
if ! have_npm_pkgs; then
  if ! command -v npm >/dev/null && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
  fi
  if command -v npm >/dev/null; then
    npm install --silent --no-audit --no-fund --prefix "$root/node" "${npm_pkgs[@]}" >/dev/null
  else
    echo "mcp-deps: npm is missing; install it with: sudo apt-get install nodejs npm" >&2
    exit 1
  fi
fi
if ! command -v git >/dev/null && [ "$(id -u)" = 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq git >/dev/null
fi
if [ ! -x "$root/mcp1/bin/python" ] || ! "$root/mcp1/bin/python" -c 'import mcp' 2>/dev/null; then
  python3 -m venv "$root/mcp1"
  "$root/mcp1/bin/python" -m pip install --quiet "$MCP1_SPEC"
fi
if ! "$root/git/bin/python" -m pip show mcp-server-git 2>/dev/null \
  | grep -qx "Version: $GIT_SERVER_VERSION"; then
  python3 -m venv "$root/git"
  "$root/git/bin/python" -m pip install --quiet "mcp-server-git==$GIT_SERVER_VERSION"
fi
