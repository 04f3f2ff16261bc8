#!/usr/bin/env bash
# Rewrite the lock files from pyproject.toml: requirements-test.lock (runtime + test extra) and
# requirements.lock (runtime only, at the same versions). Both hold every package with its
# hashes, resolved for every platform and Python >= 3.11 (`--universal`), so one lock serves this
# machine, a fresh Debian one and the container image. Versions already locked are kept unless
# asked otherwise: `scripts/lock.sh --upgrade` (everything) or `--upgrade-package NAME`.
# uv comes with the test extra (`scripts/test.sh` installs it), or set UV=/path/to/uv.
set -euo pipefail
cd "$(dirname "$0")/.."

UV="${UV:-.venv/bin/uv}"
[ -x "$UV" ] || UV="$(command -v uv)" || {
  echo "uv not found: run scripts/test.sh first (it installs uv into .venv), or set UV" >&2
  exit 1
}
# setuptools is the build backend: the installs build this package with --no-build-isolation,
# so it is locked like everything else instead of fetched at its newest version.
compile() {
  printf 'setuptools>=77\n' | "$UV" pip compile --quiet --universal --python-version 3.11 \
    --generate-hashes --custom-compile-command "scripts/lock.sh" pyproject.toml - "$@"
}
compile --extra test -o requirements-test.lock "$@"
compile -c requirements-test.lock -o requirements.lock "$@"
