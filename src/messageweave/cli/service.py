"""`messageweave service install | uninstall | status`: keep `messageweave run` running with a
systemd *user* unit (`messageweave.cli.systemd_unit`; issue #34).

`install` writes `~/.config/systemd/user/messageweave.service` (what `scripts/run.sh` runs: the
data directory and the port) and prints the commands that start it now and at every boot; with
`--now` it runs them. Writing the same unit again changes nothing. The admin key is created
here, on the terminal, when the data directory has none yet: a first start under systemd would
print it into the journal. Environment variables are not copied into the unit (it would hold
`CONFIG_ENCRYPTION_KEY` in clear): the unit serves the data directory's embedded Redis and key.
"""

from __future__ import annotations

import os
import shutil
import subprocess  # nosec B404 # systemctl / loginctl, fixed arguments
from pathlib import Path
from typing import Annotated

import typer

from messageweave.cli import instance_lock, systemd_unit
from messageweave.cli.checks import Check, print_checks
from messageweave.cli.common import console, fail, load_or_create_key
from messageweave.cli.instance import Place, checkout, origin_of, start_command
from messageweave.settings import KEY_FILE, default_data_dir, from_env

SYSTEMCTL_TIMEOUT_S = 60

service_app = typer.Typer(help="Keep MessageWeave running: a systemd user unit.",
                          no_args_is_help=True)


def _default_data_dir() -> Path:
    """The data directory `scripts/run.sh` uses: `.messageweave` in the checkout (it starts
    there), unless `$XDG_DATA_HOME` says otherwise; else `run`'s default."""
    root = checkout()
    if root is not None and not os.environ.get("XDG_DATA_HOME", "").strip():
        return root / ".messageweave"
    return default_data_dir()


def _write(path: Path, text: str) -> bool:
    """Replace `path` with `text` (atomically); False when it already says exactly that."""
    try:
        if path.read_text() == text:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return True


def _refuse_foreign(path: Path) -> None:
    """Never overwrite or remove a `messageweave.service` this command did not write."""
    try:
        text = path.read_text()
    except OSError:
        return
    if not text.startswith(systemd_unit.HEADER):
        fail(f"{path} was not written by `messageweave service install`: move it away first",
             highlight=False)


def _run(*command: str) -> bool:
    """Run one systemctl / loginctl command, printing it and, when it fails, why."""
    console.print(f"$ {' '.join(command)}", highlight=False, markup=False)
    try:
        done = subprocess.run(command, capture_output=True, text=True,  # nosec B603
                              timeout=SYSTEMCTL_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        console.print(f"[red]fail[/] {type(exc).__name__}", highlight=False)
        return False
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()
        console.print(f"[red]fail[/] {why[-1] if why else f'exit {done.returncode}'}",
                      highlight=False, markup=False)
    return done.returncode == 0


def _start(directory: Path, changed: bool) -> None:
    """`--now`: reload, enable and start (restart when a changed unit runs), linger on. An
    instance started from a terminal on the same data directory keeps it: enabled only."""
    if shutil.which("systemctl") is None:
        fail("systemctl not found: this system has no systemd to keep it running")
    running = instance_lock.owner_of(directory)
    by_hand = running is not None and not (
        running.pid is not None and systemd_unit.started_by_systemd(running.pid))
    name = systemd_unit.SERVICE
    steps = [("systemctl", "--user", "daemon-reload"),
             ("systemctl", "--user", "enable", name) if by_hand
             else ("systemctl", "--user", "enable", "--now", name)]
    if changed and running is not None and not by_hand:
        steps.append(("systemctl", "--user", "restart", name))
    if not systemd_unit.read_state().linger:
        steps.append(("loginctl", "enable-linger", systemd_unit.user()))
    for step in steps:
        if not _run(*step):
            fail("run the rest yourself: " + " && ".join(
                " ".join(s) for s in steps[steps.index(step):]), highlight=False)
    if by_hand and running is not None:
        console.print(f"{running.message()} from a terminal: stop it (Ctrl-C), then "
                      f"`systemctl --user start {name}`", highlight=False, markup=False)


@service_app.command()
def install(
    port: Annotated[int | None, typer.Option(help="Port (default: $PORT or 8080).")] = None,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    data_dir: Annotated[Path | None, typer.Option(
        help="The data directory to serve (default: the one `scripts/run.sh` uses).")] = None,
    now: Annotated[bool, typer.Option(
        "--now", help="Also run systemctl: enable and start it, and loginctl enable-linger.")]
    = False,
) -> None:
    """Write the systemd user unit that runs `messageweave run` at boot and after a failure.

    Example: messageweave service install --port 8080 --data-dir ~/messageweave/.messageweave
    """
    directory = (data_dir or _default_data_dir()).resolve()
    bind_port = port if port is not None else from_env().port
    path = systemd_unit.unit_path()
    _refuse_foreign(path)
    try:
        text = systemd_unit.render(directory, host, bind_port)
    except ValueError as exc:
        fail(str(exc), highlight=False)
    if not (directory / KEY_FILE).exists():
        key, _ = load_or_create_key(directory)
        console.print(f"\n[bold]Admin key generated[/] (shown once; it is also the encryption "
                      f"key, stored in {directory / KEY_FILE}):\n\n  {key}\n", highlight=False)
    changed = _write(path, text)
    console.print(f"{'wrote' if changed else 'unchanged:'} {path}", highlight=False, markup=False)
    console.print(f"It runs: {text.split('ExecStart=', 1)[1].splitlines()[0]}",
                  highlight=False, markup=False)
    if any(os.environ.get(v, "").strip() for v in ("REDIS_URL", "CONFIG_ENCRYPTION_KEY")):
        console.print("[yellow]note[/] REDIS_URL / CONFIG_ENCRYPTION_KEY of this shell are not "
                      "copied into the unit: it serves the data directory's Redis and key",
                      highlight=False)
    if now:
        _start(directory, changed)
        return
    console.print("Start it now and at every boot (linger: without a login):", highlight=False)
    for step in systemd_unit.next_commands(systemd_unit.read_state()):
        console.print(f"  {step}", highlight=False, markup=False)


@service_app.command()
def uninstall() -> None:
    """Stop and disable the systemd user unit, and remove it (the data directory stays).

    Example: messageweave service uninstall
    """
    path = systemd_unit.unit_path()
    if not path.exists():
        console.print(f"nothing to remove: no {path}", highlight=False, markup=False)
        return
    _refuse_foreign(path)
    name = systemd_unit.SERVICE
    if shutil.which("systemctl") is not None:
        _run("systemctl", "--user", "disable", "--now", name)
    link = systemd_unit.unit_dir() / f"{systemd_unit.WANTED_BY}.wants" / systemd_unit.UNIT_NAME
    link.unlink(missing_ok=True)  # what `disable` removes, when systemctl could not
    path.unlink()
    console.print(f"removed {path}", highlight=False, markup=False)
    if shutil.which("systemctl") is not None:
        _run("systemctl", "--user", "daemon-reload")


@service_app.command()
def status(data_dir: Annotated[Path | None, typer.Option(
        help="The data directory to look at (default: the installed unit's).")] = None) -> None:
    """Whether the unit is installed, enabled and lingering, and whether the instance runs.

    Example: messageweave service status
    """
    unit = systemd_unit.read_state()
    directory = data_dir or unit.data_dir or _default_data_dir()
    place = Place.find(origin_of(directory, {}))
    lines = place.checks()
    if place.running is None:
        lines.insert(0, Check("instance", "warn", f"not running on {place.origin.directory}",
                              f"start it: `{start_command(place.origin, unit)}`"))
    print_checks(lines)


def register(app: typer.Typer) -> None:
    app.add_typer(service_app, name="service")
