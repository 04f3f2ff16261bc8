"""What the serving process does not load while idle (issue #14: idle RSS ≤ 75 MB): the command
line. Each check runs in a fresh interpreter: this one has imported everything long ago."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from messageweave.cli import serving

_SERVING_IMPORTS = """
import json, sys

import messageweave.app
import messageweave.cli
import messageweave.cli.serving

names = ("typer", "click.testing", "ctypes", "rich", "pygments", "httpx._main",
         "messageweave.cli.serve",
         "messageweave.cli.common", "messageweave.cli.ops", "messageweave.cli.pipeline",
         "messageweave.cli.mailbox", "messageweave.cli.trace")
print(json.dumps(sorted(n for n in names if sys.modules.get(n) is not None)))  # None: blocked
"""

def _fresh(code: str) -> object:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    return json.loads(done.stdout)


def test_the_serving_process_imports_no_command_line() -> None:
    """Catches Typer, the command modules or ctypes loaded by what `messageweave serve`
    becomes: ~2 MB an idle instance held for nothing before issue #14. And (issue #26) httpx's
    command line, which `import httpx` loads whenever rich, click and pygments are installed
    (Typer brings them): rich and pygments were 3.3 MB of the idle instance's 75.6 MB."""
    assert _fresh(_SERVING_IMPORTS) == []


def test_typer_app_is_built_on_first_use() -> None:
    """Catches `messageweave.cli` building the app on import (then the serving process loads
    Typer again): the app is still there for the console script and `CliRunner`."""
    code = ("import json, sys, messageweave.cli as cli; before = 'typer' in sys.modules; "
            "app = cli.app; print(json.dumps([before, type(app).__name__, "
            "'typer' in sys.modules]))")
    assert _fresh(code) == [False, "Typer", True]


@pytest.mark.parametrize("argv", [[], ["serve"], ["serve", "--host"], ["run", "--host", "h"],
                                  ["serve", "--host", "h", "--port", "1"]], ids=repr)
def test_serving_main_takes_only_what_exec_serve_passes(argv: list[str]) -> None:
    """Catches the internal entry point serving on arguments `exec_serve` never passes (it is
    not a second command line to keep in step with `messageweave serve`)."""
    with pytest.raises(SystemExit) as refused:
        serving.main(argv)
    assert "usage: python -m messageweave.cli.serving serve --host HOST [--debug]" in str(
        refused.value)
