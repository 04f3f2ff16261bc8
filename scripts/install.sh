#!/usr/bin/env bash
# Bring ./.venv to exactly the versions of one lock file, with this checkout installed editable,
# unless it already is: `scripts/install.sh requirements.lock` (scripts/run.sh) or
# `scripts/install.sh requirements-test.lock` (scripts/test.sh).
#
# The install is skipped when .venv/.installed-<lock> holds the hash of what it was made from:
# the interpreter, this checkout's path, pyproject.toml and the lock. Source changes (a
# `git pull`) need no reinstall because the package is editable (.venv imports src/ directly);
# a change of dependencies, entry points or package data is a change of pyproject.toml or the
# lock, and reinstalls. Delete the stamp (or .venv) to force it.
set -euo pipefail
cd "$(dirname "$0")/.."

lock="${1:?usage: scripts/install.sh requirements.lock|requirements-test.lock}"
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
stamp=".venv/.installed-${lock%.lock}"
want="$({ .venv/bin/python -VV; pwd; cat pyproject.toml "$lock"; } | sha256sum | cut -d' ' -f1)"
if [ -x .venv/bin/messageweave ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
echo "installing the locked versions of $lock into .venv" >&2
pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
# --no-deps: the lock holds every package already. Without it pip resolves each package's own
# ranges again, and a new release on PyPI breaks the install (uvicorn 0.55.0, asked for as
# fakellm's `uvicorn[standard]>=0.27`, failed --require-hashes on 2026-12-02); `pip check`
# below still proves the set consistent.
"${pip[@]}" --no-deps --require-hashes -r "$lock"
# --no-build-isolation: the build backend (setuptools) is the locked one just installed.
"${pip[@]}" --no-deps --no-build-isolation -e .
# --no-deps hides a dependency that pyproject.toml names and the lock lacks: say so.
.venv/bin/python -m pip check >&2 || {
  echo "$lock does not satisfy pyproject.toml: run scripts/lock.sh and commit the locks" >&2
  exit 1
}
echo "$want" >"$stamp"
