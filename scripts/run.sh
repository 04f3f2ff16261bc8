#!/usr/bin/env bash
# Install MessageWeave into ./.venv (the locked versions, see scripts/install.sh) and start it:
# embedded Redis, a generated admin key, the admin page on http://127.0.0.1:8080/. Extra
# arguments go to `messageweave run` (see --help).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys, venv, ensurepip; assert sys.version_info >= (3, 11)' 2>/dev/null; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get install -y -q python3 python3-venv || { apt-get update -q && apt-get install -y -q python3 python3-venv; }
  else
    echo "MessageWeave needs Python >= 3.11 with venv (Debian: apt-get install python3-venv)" >&2
    exit 1
  fi
fi
PYTHON="$PYTHON" bash scripts/install.sh requirements.lock  # skipped when nothing changed
exec .venv/bin/messageweave run "$@"
