#!/usr/bin/env bash
# The whole test suite from a clean checkout: system packages (as root on Debian/Ubuntu), the
# Python environment, lint, types and bandit, the gateway's JavaScript suites, then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

if command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" = 0 ] || command -v sudo >/dev/null; }; then
  bash scripts/install-test-packages.sh
else
  echo "[test] not root on Debian/Ubuntu: install the packages of scripts/install-test-packages.sh yourself" >&2
fi

bash scripts/install.sh requirements-test.lock  # the locked versions; skipped when unchanged

echo "[test] ruff"; .venv/bin/ruff check src tests
echo "[test] mypy"; .venv/bin/mypy src
echo "[test] bandit"; .venv/bin/bandit -q -r src -c pyproject.toml
echo "[test] import-linter"; .venv/bin/lint-imports --no-cache
echo "[test] file sizes"; .venv/bin/python scripts/check_sizes.py
# Dead code. vulture rates an unused function, method, class, variable or attribute 60 % (a
# name may be used in ways it cannot see), an unused import 90 %, unreachable code 100 %: 60
# (its default) is the bar that finds dead functions at all; above it only what ruff finds is
# left. Only src/ is read, so code that only tests call counts as dead. Routes and Typer
# commands are run by their decorators; what else is used unseen is in the whitelist.
echo "[test] vulture"; .venv/bin/vulture src scripts/vulture_whitelist.py --min-confidence 60 \
  --ignore-decorators "@router.*,@*app.command"
echo "[test] hadolint"; .venv/bin/hadolint Dockerfile
echo "[test] gateway"; bash gateway/test.sh
# On every core (pytest-xdist): each worker starts its own peers, so the session's fixtures
# run once per worker; MW_TEST_WORKERS=0 runs the suite in this process alone.
echo "[test] pytest"; .venv/bin/pytest -q -n "${MW_TEST_WORKERS:-auto}" "$@"
