"""`messageweave run` (all-in-one) and `messageweave serve` (container mode); both serve through
`messageweave.cli.serving`, which `serve` replaces its process with.

`run` checks its port before anything else (nothing printed, no Redis started when it is taken),
then locks its data directory (`messageweave.cli.instance_lock`: a second start on the same
directory stops there, naming the first) and prints where its state lives and the command that
checks it; never the Redis password, and the admin key only once, when it is generated.
"""

from __future__ import annotations

import errno
import os
import shlex
import shutil
import socket
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from messageweave.cli import instance_lock
from messageweave.cli.common import console, load_or_create_key
from messageweave.cli.serving import (
    HANDOVER_ENV,
    become_server,
    exec_serve,
    handle_stop_signals,
    serve_kept,
)
from messageweave.logs import add_secret_source
from messageweave.settings import KEY_FILE, REDIS_DIR, default_data_dir, from_env
from messageweave.store.redis import EmbeddedRedis

# `serve`'s default (`run` binds 127.0.0.1): in a container, its port mapping is the boundary.
CONTAINER_HOST = "0.0.0.0"  # nosec B104 # container mode, see above
PORT_SEARCH = 100  # ports tried above a busy one for the `try --port` hint
EXIT_PORT = 1
EXIT_RUNNING = 1  # the data directory is another running instance's

DebugOption = Annotated[bool, typer.Option("--debug", help="Mount /debug/* (needs DEBUG_TOKEN).")]


def _can_listen(host: str, port: int) -> bool:
    """Whether the server could bind `host:port` now. Same family and SO_REUSEADDR as uvicorn's
    `Config.bind_socket`, so a port left in TIME_WAIT counts as free and one with a listener as
    taken. An address that cannot be bound at all raises `OSError`."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            raise
    return True


def _refuse_busy_port(host: str, port: int, directory: Path) -> None:
    """Exit with `port P is in use: try --port Q` (Q the next free port) on stderr when `port`
    is taken, before `run` prints or starts anything; with "already running" instead when
    the instance on `directory` is running (its lock file names its URL)."""
    try:
        if _can_listen(host, port):
            return
        running = instance_lock.owner_of(directory)
        if running is not None:
            _refuse_running(running)
        free = next((p for p in range(port + 1, min(port + PORT_SEARCH, 65535) + 1)
                     if _can_listen(host, p)), None)
    except OSError as exc:
        typer.echo(f"cannot listen on {host}:{port}: {exc.strerror or exc}", err=True)
        raise typer.Exit(EXIT_PORT) from None
    hint = f"try --port {free}" if free is not None else "choose another --port"
    typer.echo(f"port {port} is in use: {hint}", err=True)
    raise typer.Exit(EXIT_PORT)


def _refuse_running(owner: instance_lock.Owner) -> NoReturn:
    """Exit with `MessageWeave is already running on URL (pid N)` on stderr."""
    typer.echo(owner.message(), err=True)
    raise typer.Exit(EXIT_RUNNING)


def _lock(directory: Path, url: str) -> int:
    """The lock on `directory` (`instance_lock.take`), or exit when another instance holds it."""
    try:
        return instance_lock.take(directory, url)
    except instance_lock.AlreadyRunning as running:
        _refuse_running(running.owner)


def _program() -> str:
    """How to call this program again: `messageweave` when that is what PATH finds, else the
    path it was started by (`.venv/bin/messageweave` from scripts/run.sh)."""
    started = Path(sys.argv[0])
    if started.name != "messageweave":
        return "messageweave"
    found = shutil.which("messageweave")
    if found and Path(found).resolve() == started.resolve():
        return "messageweave"
    return shlex.quote(str(started))


def _print_locations(directory: Path, embedded: EmbeddedRedis | None, key_from_env: bool,
                     url: str) -> None:
    """Where the data, the key and the Redis socket are, the command that checks them, and the
    admin page."""
    diagnose = f"{_program()} diagnose"
    if directory != default_data_dir().resolve():
        diagnose += f" --data-dir {shlex.quote(str(directory))}"
    if embedded is None or key_from_env:
        diagnose += " (with the same REDIS_URL / CONFIG_ENCRYPTION_KEY)"
    lines = [
        ("Data directory", str(directory)),
        ("Key file", "CONFIG_ENCRYPTION_KEY (environment)" if key_from_env
         else str(directory / KEY_FILE)),
        ("Redis socket", "REDIS_URL (environment)" if embedded is None
         else str(embedded.socket)),
        ("Check it with", diagnose),
        ("Admin page", url),
    ]
    for label, value in lines:
        console.print(f"{label + ':':<16}{value}", markup=False, highlight=False, soft_wrap=True)


def run(
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int | None, typer.Option(help="Port (default: $PORT or 8080).")] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(help="Embedded Redis data and the generated key "
                          "(default: $XDG_DATA_HOME/messageweave or ./.messageweave)."),
    ] = None,
    debug: DebugOption = False,
) -> None:
    """All-in-one start: embedded Redis and a generated key unless the environment has them.

    Example: messageweave run --port 8090 --data-dir ~/.local/share/messageweave
    """
    env = dict(os.environ)
    bind_port = port if port is not None else from_env(env).port
    directory = (data_dir or default_data_dir()).resolve()
    _refuse_busy_port(host, bind_port, directory)
    handle_stop_signals()
    shown = "127.0.0.1" if host in (CONTAINER_HOST, "::") else host
    url = f"http://{shown}:{bind_port}"
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock_fd = _lock(directory, url)  # held until this process (the server it becomes) exits
    embedded: EmbeddedRedis | None = None
    if not env.get("REDIS_URL", "").strip():
        embedded = EmbeddedRedis(directory / REDIS_DIR)
        add_secret_source(embedded.secrets)  # the password is in REDIS_URL: never logged
        env["REDIS_URL"] = embedded.start()
    created = False
    key_from_env = bool(env.get("CONFIG_ENCRYPTION_KEY", "").strip())
    if not key_from_env:
        env["CONFIG_ENCRYPTION_KEY"], created = load_or_create_key(directory)
    try:
        settings = from_env(env, debug_flag=debug)
        if created:
            console.print(
                "\n[bold]Admin key generated[/] (shown once; it is also the encryption key, "
                f"stored in {directory / KEY_FILE}):\n\n  {env['CONFIG_ENCRYPTION_KEY']}\n"
            )
        _print_locations(directory, embedded, key_from_env, url + "/")
        # Serve as `serve` does, in an interpreter without Typer (issue #14), which takes the
        # Redis child over (same pid: still its parent). Here only when that cannot be.
        handed = {**env, "PORT": str(bind_port)}
        instance_lock.hand_over(lock_fd, handed)
        if embedded is not None:
            handed[HANDOVER_ENV] = embedded.handover()
        become_server(host, debug, handed)
        serve_kept(settings, host, bind_port, handed.get(HANDOVER_ENV))
    finally:
        if embedded is not None:
            embedded.stop()  # nothing left to stop when `serve_kept` ran


def serve(
    host: Annotated[str, typer.Option(help="Address to bind.")] = CONTAINER_HOST,
    debug: DebugOption = False,
) -> None:
    """Container mode: only the environment; a missing variable serves setup mode.

    Example: messageweave serve --host 127.0.0.1 (REDIS_URL, CONFIG_ENCRYPTION_KEY set)
    """
    exec_serve(host, debug)  # the serving process carries no Typer (`messageweave.cli.serving`)


def register(app: typer.Typer) -> None:
    app.command()(run)
    app.command()(serve)
