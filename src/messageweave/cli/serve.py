"""`messageweave run` (all-in-one) and `messageweave serve` (container mode)."""

from __future__ import annotations

import os
import secrets
import signal
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from messageweave import server
from messageweave.app import create_app
from messageweave.cli.common import console
from messageweave.logs import add_secret_source, configure_logging
from messageweave.settings import KEY_FILE, REDIS_DIR, default_data_dir, from_env
from messageweave.store.redis import EmbeddedRedis

# `serve`'s default (`run` binds 127.0.0.1): in a container, its port mapping is the boundary.
CONTAINER_HOST = "0.0.0.0"  # nosec B104 # container mode, see above

DebugOption = Annotated[bool, typer.Option("--debug", help="Mount /debug/* (needs DEBUG_TOKEN).")]


def _exit_cleanly(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def _handle_stop_signals() -> None:
    """uvicorn shuts down gracefully, then re-raises the signal it caught to the handler that
    was there before it: this one, so `finally` blocks (the embedded Redis) still run."""
    signal.signal(signal.SIGTERM, _exit_cleanly)
    signal.signal(signal.SIGINT, _exit_cleanly)


def load_or_create_key(data_dir: Path) -> tuple[str, bool]:
    """The admin key stored in `data_dir` (mode 0600), generating it on first use."""
    path = data_dir / KEY_FILE
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip(), False
    key = secrets.token_hex(32)
    with os.fdopen(fd, "w") as f:
        f.write(key + "\n")
    return key, True


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
    """All-in-one start: embedded Redis and a generated key unless the environment has them."""
    _handle_stop_signals()
    env = dict(os.environ)
    directory = (data_dir or default_data_dir()).resolve()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    embedded: EmbeddedRedis | None = None
    if not env.get("REDIS_URL", "").strip():
        embedded = EmbeddedRedis(directory / REDIS_DIR)
        add_secret_source(embedded.secrets)  # the password is in REDIS_URL: never logged
        env["REDIS_URL"] = embedded.start()
        console.print(f"Embedded Redis running, data in [bold]{embedded.data_dir}[/]")
    created = False
    if not env.get("CONFIG_ENCRYPTION_KEY", "").strip():
        env["CONFIG_ENCRYPTION_KEY"], created = load_or_create_key(directory)
    try:
        settings = from_env(env, debug_flag=debug)
        bind_port = port if port is not None else settings.port
        shown = "127.0.0.1" if host in (CONTAINER_HOST, "::") else host
        url = f"http://{shown}:{bind_port}/"
        if created:
            console.print(
                "\n[bold]Admin key generated[/] (shown once; it is also the encryption key, "
                f"stored in {directory / KEY_FILE}):\n\n  {env['CONFIG_ENCRYPTION_KEY']}\n"
            )
        console.print(f"Admin page: [bold]{url}[/]")
        configure_logging()
        server.serve(create_app(settings), host, bind_port)
    finally:
        if embedded is not None:
            embedded.stop()


def serve(
    host: Annotated[str, typer.Option(help="Address to bind.")] = CONTAINER_HOST,
    debug: DebugOption = False,
) -> None:
    """Container mode: only the environment; a missing variable serves setup mode."""
    _handle_stop_signals()
    settings = from_env(debug_flag=debug)
    configure_logging()
    server.serve(create_app(settings), host, settings.port)


def register(app: typer.Typer) -> None:
    app.command()(run)
    app.command()(serve)
