"""The release number (the package's version, from pyproject.toml as installed) and the build
fingerprint `<git sha or nogit>+<UTC time>`, each computed once per process.

The public `/api/status` shows the release only; the fingerprint, which names the exact commit
(and so which fixes an instance lacks), only to an admin session (issue #23).
"""

from __future__ import annotations

import functools
import subprocess
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path


def _git_sha() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=2,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return "nogit"
    sha = out.stdout.strip()
    return sha if out.returncode == 0 and sha else "nogit"


@functools.cache
def build_version() -> str:
    return f"{_git_sha()}+{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"


@functools.cache
def release_version() -> str:
    """`pyproject.toml`'s version of the installed package (`0.1.0`); `unknown` when the
    package is not installed (run from a bare source tree)."""
    try:
        return metadata.version("messageweave")
    except metadata.PackageNotFoundError:
        return "unknown"
