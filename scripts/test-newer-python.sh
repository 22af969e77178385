#!/usr/bin/env bash
# The fast test tier again on the newest Python 3.12+ this machine has (pyenv's versions, then the
# PATH's). amends declares requires-python >= 3.11 and is developed on 3.11; 3.12 changed what a
# task accepts (no generator-based coroutines), what cProfile sees (every thread) and how tasks
# may start (eagerly), and 3.13 warns about every sqlite3 connection left open. Each broke amends
# once without any 3.11 test noticing. The venv (.venv-py3.X) gets the same extras and pins as
# .venv. Where no such interpreter exists, it says so and runs nothing: no Python is downloaded.
set -euo pipefail
cd "$(dirname "$0")/.."
newest=""
for candidate in $(ls -d "$HOME"/.pyenv/versions/3.1[2-9]*/bin/python3 2>/dev/null | sort -V) \
  $(command -v python3.12 python3.13 python3.14 2>/dev/null || true); do
  if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
    newest=$candidate
  fi
done
if [ -z "$newest" ]; then
  echo "test-newer-python: no Python 3.12+ on this machine; the newer-Python tier did not run" >&2
  exit 0
fi
version=$("$newest" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
venv=".venv-py$version"
stamp="$venv/.installed-$(cat pyproject.toml requirements-test.txt constraints-test.txt | cksum | cut -d' ' -f1)"
if [ ! -e "$stamp" ]; then
  test -x "$venv/bin/python" || "$newest" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet -e '.[dev,server,postgres,testing,langchain,pydantic-ai,openai-agents,temporal,mcp,otel]' \
    -r requirements-test.txt -c constraints-test.txt
  rm -f "$venv"/.installed-*
  touch "$stamp"
fi
echo "test-newer-python: the fast tier on $("$venv/bin/python" --version) ($newest)"
"$venv/bin/python" -m pytest -q -m "not slow" -p no:cacheprovider
