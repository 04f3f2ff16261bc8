"""Fail when a source file outgrows its room (docs/architecture.md): Python over 500 lines,
JavaScript over 400. Run by scripts/test.sh."""

import pathlib
import sys

LIMITS = {".py": 500, ".js": 400}

too_big = []
for path in sorted(pathlib.Path("src").rglob("*")):
    limit = LIMITS.get(path.suffix)
    if limit is not None and path.is_file():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > limit:
            too_big.append(f"{path}: {lines} lines (at most {limit})")
if too_big:
    print("\n".join(too_big), file=sys.stderr)
    sys.exit(1)
