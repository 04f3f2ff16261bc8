"""`scripts/install.sh` (what `scripts/run.sh` and `scripts/test.sh` install with) skips the
install while nothing it installs from has changed.

It runs the real script with real pip on a copy holding a tiny stand-in project, whose lock is
the build backend's entry of the project's own lock (setuptools, hash-checked; pip's cache
usually has it), so it stays fast."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PYPROJECT = """\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "stampcheck"
version = "{version}"

[project.scripts]
messageweave = "stampcheck:main"
"""


def _locked(name: str) -> str:
    """The entry of package `name` in requirements.lock: its pin and hashes."""
    text = (ROOT / "requirements.lock").read_text()
    match = re.search(rf"^{name}==.*?(?=^\S)", text, re.MULTILINE | re.DOTALL)
    assert match, f"{name} is not in requirements.lock"
    return match[0]


def _install(project: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "scripts/install.sh", "requirements.lock"], cwd=project,
                          env={**os.environ, "PYTHON": sys.executable},  # it makes .venv
                          capture_output=True, text=True, timeout=120)


def _says(project: Path) -> str:
    return subprocess.run([str(project / ".venv/bin/messageweave")], capture_output=True,
                          text=True, timeout=30, check=True).stdout


def _write_code(project: Path, word: str) -> None:
    code = f"def main() -> None:\n    print({word!r})\n"
    (project / "src/stampcheck/__init__.py").write_text(code)


def test_install_is_skipped_until_pyproject_or_the_lock_changes(tmp_path: Path) -> None:
    """Bug: `scripts/run.sh` reinstalled the package on every start (4-5 s), and a stamp that
    ignored the lock would keep a venv at the old versions after a `git pull` changed them."""
    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts/install.sh", project / "scripts/install.sh")
    (project / "src/stampcheck").mkdir(parents=True)
    _write_code(project, "one")
    (project / "pyproject.toml").write_text(PYPROJECT.format(version="1.0"))
    (project / "requirements.lock").write_text(_locked("setuptools"))

    first = _install(project)
    assert first.returncode == 0, first.stderr
    assert "installing the locked versions" in first.stderr
    assert _says(project) == "one\n"
    record = next((project / ".venv/lib").glob("python*/site-packages/stampcheck-1.0.dist-info"))
    installed_at = record.stat().st_mtime_ns

    _write_code(project, "two")  # a source change: editable, so no reinstall is needed
    second = _install(project)
    assert second.returncode == 0 and second.stderr == "", second.stderr
    assert record.stat().st_mtime_ns == installed_at
    assert _says(project) == "two\n"

    with (project / "requirements.lock").open("a") as lock:
        lock.write("# a changed lock\n")
    third = _install(project)
    assert third.returncode == 0 and "installing the locked versions" in third.stderr

    (project / "pyproject.toml").write_text(PYPROJECT.format(version="1.1"))
    fourth = _install(project)
    assert fourth.returncode == 0 and "installing the locked versions" in fourth.stderr
    assert next((project / ".venv/lib").glob("python*/site-packages/stampcheck-1.1.dist-info"))
    assert _install(project).stderr == ""
