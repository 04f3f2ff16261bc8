"""The process that serves: what `run` and `serve` do once their options are parsed.

`messageweave serve` parses its options with Typer, then replaces its process (`exec_serve`)
with `python -P -m messageweave.cli.serving serve --host HOST [--debug]`: the same pid, environment
and file descriptors (a container's signals still reach it), in an interpreter that never
imported Typer or the other commands, which it would carry for nothing while it serves (~1.8 MB
of idle RSS, issue #14). This module imports neither. `run` serves in its own process: it owns
the embedded Redis it started and stops it on the way out.
"""

from __future__ import annotations

import importlib.machinery
import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType

import messageweave
from messageweave import server
from messageweave.app import create_app
from messageweave.logs import configure_logging
from messageweave.settings import Settings, from_env

MODULE = "messageweave.cli.serving"
COMMAND = "serve"  # the child's first argument, so `ps` still shows `messageweave ... serve`


def _exit_cleanly(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def handle_stop_signals() -> None:
    """uvicorn shuts down gracefully, then re-raises the signal it caught to the handler that
    was there before it: this one, so `finally` blocks (the embedded Redis) still run."""
    signal.signal(signal.SIGTERM, _exit_cleanly)
    signal.signal(signal.SIGINT, _exit_cleanly)


def serve_app(settings: Settings, host: str, port: int) -> None:
    """JSON log lines from here on, then the app until SIGTERM/SIGINT."""
    configure_logging()
    server.serve(create_app(settings), host, port)


def serve_here(host: str, debug: bool) -> None:
    """Container mode in this process: only the environment; a missing variable serves setup
    mode."""
    handle_stop_signals()
    settings = from_env(debug_flag=debug)
    serve_app(settings, host, settings.port)


def _interpreter() -> list[str]:
    """This interpreter, with `-P` (neither the working directory nor a script's directory is
    put on sys.path) unless that is where this package was found. Command-line flags such as
    `-X` do not carry over; the environment (`PYTHON*` variables) does."""
    found = importlib.machinery.PathFinder.find_spec("messageweave", sys.path[1:])
    same = found is not None and found.origin == messageweave.__file__
    return [sys.executable, *(["-P"] if same else [])]


def exec_serve(host: str, debug: bool) -> None:
    """Become the serving interpreter (`main`); serve in this process when that cannot be."""
    if sys.executable:
        argv = [*_interpreter(), "-m", MODULE, COMMAND, "--host", host,
                *(["--debug"] if debug else [])]
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            os.execv(sys.executable, argv)  # nosec B606 # our own interpreter, fixed argv
        except OSError:
            pass  # e.g. the interpreter's file is gone: serving here still works
    serve_here(host, debug)


def main(argv: Sequence[str] | None = None) -> None:
    """`serve --host HOST [--debug]`, exactly as `exec_serve` passes them (not a user command:
    `messageweave serve` is)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3 or args[:2] != [COMMAND, "--host"] or args[3:] not in ([], ["--debug"]):
        raise SystemExit(f"usage: python -m {MODULE} {COMMAND} --host HOST [--debug]")
    serve_here(args[2], debug=args[3:] == ["--debug"])


if __name__ == "__main__":
    main()
