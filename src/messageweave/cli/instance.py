"""How the instance a command looks at was started, and how to start it again (issue #34).

Two ways: `scripts/run.sh` / `messageweave run` keep the embedded Redis and the key in a *data
directory*; a container (`messageweave serve`) has `REDIS_URL` and `CONFIG_ENCRYPTION_KEY` in
its environment. `diagnose` says which one it found (`Origin.describe`) and gives the remedy of
that way: a stopped data-directory instance is started again (`start_command`: the systemd user
unit when it is installed for this directory, else `scripts/run.sh` from the checkout, else
`messageweave run --data-dir D`), it is not a Redis to check.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import messageweave
from messageweave.cli import instance_lock, systemd_unit
from messageweave.cli.checks import Check, ok
from messageweave.settings import DEFAULT_PORT, KEY_FILE, default_data_dir

RUN_SCRIPT = Path("scripts") / "run.sh"


@dataclass(frozen=True)
class Origin:
    """Where a command's `REDIS_URL` and `CONFIG_ENCRYPTION_KEY` came from."""

    directory: Path  # the data directory looked in (resolved)
    redis_from_env: bool
    key_from_env: bool

    @property
    def data_dir(self) -> bool:
        """Whether the instance is a data directory's: its Redis runs with `messageweave run`."""
        return not self.redis_from_env

    def describe(self) -> str:
        """The `environment` line of `diagnose`, true to where each of the two came from."""
        if self.redis_from_env and self.key_from_env:
            return "REDIS_URL and CONFIG_ENCRYPTION_KEY from the environment"
        if self.redis_from_env:
            return ("REDIS_URL from the environment, the key from the data directory "
                    f"{self.directory}")
        key = ("CONFIG_ENCRYPTION_KEY from the environment" if self.key_from_env
               else "its key")
        return (f"the data directory {self.directory} of `scripts/run.sh` / `messageweave run` "
                f"(its embedded Redis and {key})")


def origin_of(data_dir: Path | None, env: Mapping[str, str] | None = None) -> Origin:
    """The origin `runtime.settings_from_data_dir(data_dir)` completes the environment from."""
    env = os.environ if env is None else env
    return Origin(
        directory=(data_dir or default_data_dir()).resolve(),
        redis_from_env=bool(env.get("REDIS_URL", "").strip()),
        key_from_env=bool(env.get("CONFIG_ENCRYPTION_KEY", "").strip()),
    )


def checkout() -> Path | None:
    """The source checkout this package runs from (`scripts/run.sh` installs it editable into
    the checkout's `.venv`), or None for an installed wheel (a container image)."""
    root = Path(messageweave.__file__).resolve().parents[2]
    return root if (root / RUN_SCRIPT).is_file() else None


def _port(owner: instance_lock.Owner | None) -> int | None:
    """The port the data directory's last instance served on (its lock file's URL)."""
    if owner is None or owner.url is None:
        return None
    try:
        return urlsplit(owner.url).port
    except ValueError:
        return None


def start_command(origin: Origin, unit: systemd_unit.UnitState) -> str:
    """The command that starts the stopped instance of `origin`'s data directory again, with
    the port it last served on."""
    if unit.serves(origin.directory):
        return f"systemctl --user start {systemd_unit.SERVICE}"
    port = _port(instance_lock.last_recorded(origin.directory))
    args = [] if port in (None, DEFAULT_PORT) else ["--port", str(port)]
    root = checkout()
    if root is None:
        return shlex.join(["messageweave", "run", "--data-dir", str(origin.directory), *args])
    if origin.directory != (root / ".messageweave").resolve():
        args = ["--data-dir", str(origin.directory), *args]
    run = shlex.join([str(RUN_SCRIPT), *args])
    return run if Path.cwd().resolve() == root else f"cd {shlex.quote(str(root))} && {run}"


@dataclass(frozen=True)
class Place:
    """What `diagnose` knows of where the instance lives: how it was started, the systemd user
    unit, and the instance running on the data directory (its lock's holder), if any."""

    origin: Origin
    unit: systemd_unit.UnitState
    running: instance_lock.Owner | None

    @classmethod
    def find(cls, origin: Origin | None) -> Place:
        """`origin` None: from the environment (a container)."""
        found = origin or Origin(default_data_dir().resolve(), True, True)
        running = instance_lock.owner_of(found.directory) if found.data_dir else None
        return cls(found, systemd_unit.read_state(), running)

    def _by_systemd(self) -> bool:
        return self.running is not None and self.running.pid is not None and \
            systemd_unit.started_by_systemd(self.running.pid)

    def _where(self) -> str:
        assert self.running is not None
        on = f" on {self.running.url}" if self.running.url else ""
        pid = f"pid {self.running.pid}, " if self.running.pid else ""
        how = "started by systemd" if self._by_systemd() else "started by hand, not by systemd"
        return f"{on} ({pid}{how})"

    def checks(self) -> list[Check]:
        """A data directory's lines: the instance on it (when it runs) and the systemd unit."""
        lines = [ok("instance", "running" + self._where())] if self.running else []
        return [*lines, self.service()]

    def service(self) -> Check:
        unit, directory = self.unit, self.origin.directory
        if not unit.installed:
            return ok("service", "no systemd user unit: it runs only while `scripts/run.sh` "
                      "runs (`messageweave service install` keeps it running)")
        if not unit.serves(directory):
            return Check("service", "warn", f"the systemd user unit {unit.path} serves "
                         f"{unit.data_dir}, not {directory}",
                         "replace it: `messageweave service install --data-dir "
                         f"{shlex.quote(str(directory))}`")
        if not unit.enabled:
            return Check("service", "warn", f"installed ({unit.path}) but not enabled: "
                         "it does not start by itself",
                         " && ".join(systemd_unit.next_commands(unit)[:2]))
        if not unit.linger:
            return Check("service", "warn", "installed and enabled, linger off: it starts at "
                         "your login and stops at your logout, not at boot",
                         f"loginctl enable-linger {shlex.quote(systemd_unit.user())}")
        return ok("service", f"installed, enabled, linger on: systemd starts it at boot and "
                  f"after a failure ({unit.path})")

    def redis_down(self, error: str) -> Check:
        """Redis does not answer: for a data directory, the instance is stopped (its embedded
        Redis runs only with it) or its Redis is stuck."""
        if not self.origin.data_dir:
            return Check("redis", "fail", f"unreachable ({error})",
                         "check REDIS_URL and that Redis is running")
        if self.running is None:
            logs = (f"; why it stopped: `journalctl --user -u {systemd_unit.SERVICE} -e`"
                    if self.unit.serves(self.origin.directory) and self.unit.enabled else "")
            return Check("redis", "fail", f"unreachable ({error}): MessageWeave is not running "
                         f"on {self.origin.directory} (its embedded Redis runs with it)",
                         f"start it: `{start_command(self.origin, self.unit)}`{logs}")
        restart = (f"systemctl --user restart {systemd_unit.SERVICE}" if self._by_systemd()
                   else f"stop it (Ctrl-C in its terminal) and start it again: "
                        f"`{start_command(self.origin, self.unit)}`")
        return Check("redis", "fail", f"unreachable ({error}): the embedded Redis of the "
                     f"instance running{self._where()} does not answer", restart)

    def missing(self, names: list[str]) -> Check:
        """`environment` fails: what is missing, where it was looked for, and what helps."""
        found = f"missing or invalid: {', '.join(names)}"
        directory = self.origin.directory
        if self.origin.redis_from_env and self.origin.key_from_env:
            return Check("environment", "fail", found,
                         "set REDIS_URL and CONFIG_ENCRYPTION_KEY (64 hex characters)")
        if (directory / KEY_FILE).exists() and names == ["REDIS_URL"]:
            return Check("environment", "fail", f"{found}: MessageWeave has not run on the data "
                         f"directory {directory} yet (no embedded Redis there)",
                         f"start it: `{start_command(self.origin, self.unit)}`")
        root = checkout()
        if root is not None and directory == (root / ".messageweave").resolve():
            return Check("environment", "fail", f"{found}: MessageWeave has not run from this "
                         f"checkout yet (no {directory})",
                         f"start it: `{start_command(self.origin, self.unit)}`")
        ran = f" (`scripts/run.sh` keeps it in {root / '.messageweave'})" if root else ""
        return Check("environment", "fail", f"{found}: not in the environment, and no data "
                     f"directory of `messageweave run` at {directory}",
                     "run diagnose where `messageweave run` was started, or pass --data-dir D "
                     f"with its data directory{ran}; in a container, set REDIS_URL and "
                     "CONFIG_ENCRYPTION_KEY (64 hex characters)")

    def remedy_wrong_key(self) -> str:
        if self.origin.key_from_env:
            return "CONFIG_ENCRYPTION_KEY is not the key it was saved with"
        return (f"{self.origin.directory / KEY_FILE} is not the key it was saved with: restore "
                "that file (the key printed at the first start)")

    def page(self) -> str:
        """` (URL/)`: the admin page of the running instance, when known."""
        url = self.running.url if self.running else None
        return f" ({url}/)" if url else ""

    def remedy_not_receiving(self) -> str:
        if not self.origin.data_dir:
            return "check that the service is running (`messageweave serve` / `messageweave run`)"
        if self.running is None:
            return f"start it: `{start_command(self.origin, self.unit)}`"
        if self._by_systemd():
            return f"see its log: `journalctl --user -u {systemd_unit.SERVICE} -e`"
        return "see its log in the terminal it runs in"
