"""The build fingerprint `<git sha or nogit>+<UTC time>`, computed once per process."""

from __future__ import annotations

import functools
import subprocess
from datetime import UTC, datetime
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
