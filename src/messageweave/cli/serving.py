"""The process that serves: what `run` and `serve` do once their options are parsed.

`messageweave serve` parses its options with Typer, then replaces its process (`exec_serve`)
with `python -P -m messageweave.cli.serving serve --host HOST [--debug]`: the same pid, environment
and file descriptors (a container's signals still reach it), in an interpreter that never
imported Typer or the other commands, which it would carry for nothing while it serves (~1.8 MB
of idle RSS, issue #14). This module imports neither. `run` becomes the same interpreter once it
has started its embedded Redis, locked its data directory and printed where things are; the
Redis child (still ours: the pid does not change) is handed over in `HANDOVER_ENV`, kept alive
(`KeptRedis`: restarted if it dies) and stopped by `serve_kept` on the way out; the lock's
descriptor (`instance_lock.LOCK_FD_ENV`) is kept open until the process exits.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from types import FrameType

import messageweave
from messageweave import server
from messageweave.app import create_app
from messageweave.cli import instance_lock
from messageweave.logs import configure_logging
from messageweave.settings import Settings, from_env
from messageweave.store.redis import KeptRedis

MODULE = "messageweave.cli.serving"
COMMAND = "serve"  # the child's first argument, so `ps` still shows `messageweave ... serve`
# Set by `run` for the interpreter it becomes: its embedded Redis, to stop on the way out.
HANDOVER_ENV = "MESSAGEWEAVE_REDIS_HANDOVER"


def _exit_cleanly(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def handle_stop_signals() -> None:
    """uvicorn shuts down gracefully, then re-raises the signal it caught to the handler that
    was there before it: this one, so `finally` blocks (the embedded Redis) still run."""
    signal.signal(signal.SIGTERM, _exit_cleanly)
    signal.signal(signal.SIGINT, _exit_cleanly)


def serve_kept(settings: Settings, host: str, port: int, handover: str | None = None) -> None:
    """JSON log lines from here on, then the app until SIGTERM/SIGINT. The embedded Redis `run`
    handed over (`handover`, see `HANDOVER_ENV`) is kept alive meanwhile and stopped after."""
    configure_logging()
    kept = KeptRedis.from_handover(handover) if handover else None
    try:
        server.serve(create_app(settings), host, port)
    finally:
        if kept is not None:
            kept.stop()


def serve_here(host: str, debug: bool) -> None:
    """Serve in this process from the environment alone (a missing variable serves setup mode),
    with the embedded Redis and the data directory's lock `run` handed over, if any."""
    handle_stop_signals()
    handover = os.environ.pop(HANDOVER_ENV, None)
    instance_lock.keep_private()
    settings = from_env(debug_flag=debug)
    serve_kept(settings, host, settings.port, handover)


def _interpreter() -> list[str]:
    """This interpreter, with `-P` (neither the working directory nor a script's directory is
    put on sys.path) unless that is where this package was found. Command-line flags such as
    `-X` do not carry over; the environment (`PYTHON*` variables) does."""
    found = importlib.machinery.PathFinder.find_spec("messageweave", sys.path[1:])
    same = found is not None and found.origin == messageweave.__file__
    return [sys.executable, *(["-P"] if same else [])]


def become_server(host: str, debug: bool, env: Mapping[str, str] | None = None) -> None:
    """Replace this process with the serving interpreter (`main`), with `env` (default: this
    environment). Returns only when that cannot be (e.g. the interpreter's file is gone)."""
    if not sys.executable:
        return
    argv = [*_interpreter(), "-m", MODULE, COMMAND, "--host", host,
            *(["--debug"] if debug else [])]
    sys.stdout.flush()
    sys.stderr.flush()
    with contextlib.suppress(OSError):  # our own interpreter, fixed argv:
        os.execve(sys.executable, argv, dict(os.environ if env is None else env))  # nosec B606


def exec_serve(host: str, debug: bool) -> None:
    """Become the serving interpreter; serve in this process when that cannot be."""
    become_server(host, debug)
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
