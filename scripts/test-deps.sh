#!/usr/bin/env bash
# Installs the system pieces the slow test tier needs (a fresh CI machine has none of them).
# Idempotent: does nothing when everything is already there.
set -euo pipefail
need=()
[ -x /usr/lib/postgresql/15/bin/initdb ] || need+=(postgresql-15)
[ -x /usr/bin/chromium ] || need+=(chromium)
[ -x /usr/bin/chromedriver ] || need+=(chromium-driver)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "test-deps: missing ${need[*]}; install them with: sudo apt-get install ${need[*]}" >&2
    exit 1
  fi
fi
bash "$(dirname "$0")/mcp-deps.sh"  # the MCP gateway tests: filesystem server (npm), an mcp 1.x venv
