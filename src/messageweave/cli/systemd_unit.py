"""The systemd *user* unit that keeps `messageweave run` running (issue #34): what it says,
where it lives, and whether systemd will start it.

`messageweave service install` writes it (`messageweave.cli.service`); `diagnose` reads its state
(`read_state`). Everything here reads files only, so it answers in a container without systemd
too: a unit is *enabled* when `systemctl --user enable` has linked it into
`default.target.wants/`, and *lingering* when logind keeps the user's manager running without a
login (`/var/lib/systemd/linger/<user>`, what `loginctl enable-linger` creates).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

UNIT_NAME = "messageweave.service"
SERVICE = "messageweave"  # what `systemctl --user … messageweave` names
WANTED_BY = "default.target"  # started with the user's manager: at login, or at boot with linger
LINGER_DIR = Path("/var/lib/systemd/linger")
RESTART_SEC = 10
HEADER = ("# Written by `messageweave service install`; `messageweave service uninstall` "
          "removes it.")
# Characters systemd takes literally in a word of ExecStart (no quotes needed).
_PLAIN = re.compile(r"[A-Za-z0-9/._:@+=,-]+")


def unit_dir() -> Path:
    """Where systemd looks for the user's own units: `$XDG_CONFIG_HOME/systemd/user`."""
    config = os.environ.get("XDG_CONFIG_HOME", "").strip()
    return (Path(config) if config else Path.home() / ".config") / "systemd" / "user"


def unit_path() -> Path:
    return unit_dir() / UNIT_NAME


def _enabled_link() -> Path:
    return unit_dir() / f"{WANTED_BY}.wants" / UNIT_NAME


def program() -> list[str]:
    """How the unit starts this program: the `messageweave` console script beside this
    interpreter (`.venv/bin/messageweave`, what `scripts/run.sh` runs), else the one on PATH,
    else this interpreter with `-m messageweave.cli`. Absolute, symlinks kept: a venv's
    interpreter is a symlink that must not be resolved out of the venv."""
    beside = Path(sys.executable).parent / "messageweave"
    if beside.is_file() and os.access(beside, os.X_OK):
        return [os.path.abspath(beside)]
    found = shutil.which("messageweave")
    if found:
        return [os.path.abspath(found)]
    return [os.path.abspath(sys.executable), "-m", "messageweave.cli"]


def _word(arg: str) -> str:
    """One ExecStart word, quoted for systemd: `%` is a specifier and `$` a variable there."""
    if "\n" in arg or "\r" in arg or "\0" in arg:
        raise ValueError(f"a line break cannot be part of a unit file: {arg!r}")
    escaped = arg.replace("%", "%%").replace("$", "$$")
    if _PLAIN.fullmatch(arg):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def command(data_dir: Path, host: str, port: int) -> list[str]:
    """What the unit runs: `messageweave run` on the data directory and port."""
    return [*program(), "run", "--host", host, "--port", str(port),
            "--data-dir", str(data_dir)]


def render(data_dir: Path, host: str, port: int) -> str:
    """The unit's text. `run` stops its embedded Redis itself on SIGTERM, so only the main
    process gets it (`KillMode=mixed`); a stop by systemctl exits 0 and is not restarted."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host  # nosec B104 # only shown
    exec_start = " ".join(_word(a) for a in command(data_dir, host, port))
    about = f"MessageWeave on http://{shown}:{port}/ (data directory {data_dir})"
    return "\n".join([
        HEADER,
        "[Unit]",
        f"Description={about.replace('%', '%%')}",
        "",
        "[Service]",
        f"ExecStart={exec_start}",
        "Restart=on-failure",
        f"RestartSec={RESTART_SEC}",
        "KillMode=mixed",
        "",
        "[Install]",
        f"WantedBy={WANTED_BY}",
        "",
    ])


def _served_data_dir(text: str) -> Path | None:
    """The `--data-dir` of a unit this module wrote (None when it names none)."""
    for line in text.splitlines():
        if line.startswith("ExecStart="):
            with contextlib.suppress(ValueError):
                words = shlex.split(line.removeprefix("ExecStart=").replace("%%", "%")
                                    .replace("$$", "$"))
                if "--data-dir" in words[:-1]:
                    return Path(words[words.index("--data-dir") + 1])
    return None


def user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


@dataclass(frozen=True)
class UnitState:
    """The unit as systemd will find it: written, linked for the user's manager, lingering."""

    path: Path
    installed: bool
    enabled: bool
    linger: bool
    data_dir: Path | None  # what the installed unit serves

    def serves(self, directory: Path) -> bool:
        return self.installed and self.data_dir is not None and \
            self.data_dir.resolve() == directory.resolve()


def read_state() -> UnitState:
    path = unit_path()
    try:
        text: str | None = path.read_text()
    except OSError:
        text = None
    return UnitState(
        path=path,
        installed=text is not None,
        enabled=_enabled_link().exists(),
        linger=(LINGER_DIR / user()).exists(),
        data_dir=None if text is None else _served_data_dir(text),
    )


def started_by_systemd(pid: int) -> bool:
    """Whether `pid` runs in this unit's control group (started by systemd, not a terminal)."""
    try:
        cgroup = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False
    return f"/{UNIT_NAME}" in cgroup


def next_commands(state: UnitState) -> list[str]:
    """What is left to run so that systemd starts the unit at boot."""
    steps = ["systemctl --user daemon-reload",
             f"systemctl --user enable --now {SERVICE}"]
    if not state.linger:
        steps.append(f"loginctl enable-linger {shlex.quote(user())}")
    return steps
