#!/usr/bin/env bash
# Installs what the MCP gateway's slow tests need, from the project's own pins (issue 14):
#  - the reference filesystem MCP server (npm) into .amends-mcp/node
#  - an mcp 1.x client in its own venv (.amends-mcp/mcp1), since amends[mcp] needs mcp 2.x
# Idempotent: does nothing when both are already there. Needs node/npm and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
FS_VERSION=2026.8.31
MCP1_SPEC='mcp>=1.20,<2'
root=.amends-mcp
mkdir -p "$root"
if [ ! -f "$root/node/node_modules/@modelcontextprotocol/server-filesystem/package.json" ]; then
  if ! command -v npm >/dev/null && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
  fi
  if command -v npm >/dev/null; then
    npm install --silent --no-audit --no-fund --prefix "$root/node" \
      "@modelcontextprotocol/server-filesystem@$FS_VERSION" >/dev/null
  else
    echo "mcp-deps: npm is missing; install it with: sudo apt-get install nodejs npm" >&2
    exit 1
  fi
fi
if [ ! -x "$root/mcp1/bin/python" ] || ! "$root/mcp1/bin/python" -c 'import mcp' 2>/dev/null; then
  python3 -m venv "$root/mcp1"
  "$root/mcp1/bin/python" -m pip install --quiet "$MCP1_SPEC"
fi
