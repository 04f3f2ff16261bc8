"""Issue #34 (items 5 and 6): `messageweave service install` keeps the instance running with a
systemd user unit, and `diagnose` knows how the instance was started (a `scripts/run.sh` data
directory, or the environment) and gives that way's remedies, unit included.

Each test runs with its own HOME / XDG_CONFIG_HOME, so nothing is installed for the real user.
systemd's user manager does not run here: `systemctl --user enable` (which only links files)
and `systemd-analyze --user verify` do, and are used for real."""

from __future__ import annotations

import getpass
import os
import re
import shlex
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

import messageweave
from tests.helpers import console_script, free_port, wait_healthy

UNIT = Path("systemd") / "user" / "messageweave.service"
ENABLED = Path("systemd") / "user" / "default.target.wants" / "messageweave.service"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    return home


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("REDIS_URL", "CONFIG_ENCRYPTION_KEY", "PORT", "DEBUG_ENABLED",
                        "DEBUG_TOKEN", "XDG_DATA_HOME")}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), COLUMNS="300")
    return env


def _mw(home: Path, *args: str, cwd: Path | None = None,
        **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([console_script("messageweave"), *args], env={**_env(home), **extra},
                          cwd=cwd, capture_output=True, text=True, timeout=60)


def _exec_start(unit: str) -> list[str]:
    [line] = [ln for ln in unit.splitlines() if ln.startswith("ExecStart=")]
    return shlex.split(line.removeprefix("ExecStart=").replace("%%", "%"))


def test_service_install_writes_a_user_unit_systemd_accepts(home: Path, tmp_path: Path) -> None:
    """Catches "Nothing keeps it running" (issue #34, item 6): there was no unit and no
    `service install`. The unit must run `messageweave run` on the data directory and port
    (a path with a space and a `%` survives systemd's quoting), restart on failure, pass
    `systemd-analyze verify` (its ExecStart exists), and installing it again changes nothing."""
    data_dir = tmp_path / "my data %h"
    port = free_port()
    done = _mw(home, "service", "install", "--port", str(port), "--data-dir", str(data_dir))
    assert done.returncode == 0, done.stdout + done.stderr
    unit_file = home / ".config" / UNIT
    unit = unit_file.read_text()
    words = _exec_start(unit)
    assert Path(words[0]).is_file() and os.access(words[0], os.X_OK), words
    assert words[1:] == ["run", "--host", "127.0.0.1", "--port", str(port),
                         "--data-dir", str(data_dir)], unit
    assert "\nRestart=on-failure\n" in unit and "\nWantedBy=default.target\n" in unit
    for step in ("systemctl --user daemon-reload", "systemctl --user enable --now messageweave",
                 "loginctl enable-linger"):
        assert step in done.stdout, done.stdout
    # The first start under systemd would print a new admin key into the journal: it is made
    # here, shown once on the terminal.
    key = (data_dir / "encryption.key").read_text().strip()
    assert key in done.stdout and (data_dir / "encryption.key").stat().st_mode & 0o777 == 0o600
    if shutil.which("systemd-analyze"):
        runtime = tmp_path / "runtime"
        runtime.mkdir(mode=0o700)
        verified = subprocess.run(["systemd-analyze", "--user", "verify", str(unit_file)],
                                  env={**_env(home), "XDG_RUNTIME_DIR": str(runtime)},
                                  capture_output=True, text=True, timeout=60)
        assert verified.returncode == 0 and verified.stderr == "", verified.stderr
    # The shell's secrets never go into the unit (it would hold them in clear).
    secret = "ab" * 32
    again = _mw(home, "service", "install", "--port", str(port), "--data-dir", str(data_dir),
                CONFIG_ENCRYPTION_KEY=secret, REDIS_URL="redis://:pw-SECRET@127.0.0.1:1/0")
    assert again.returncode == 0 and "unchanged" in again.stdout, again.stdout
    assert "are not copied into the unit" in again.stdout
    assert key not in again.stdout and unit_file.read_text() == unit
    assert secret not in unit and "pw-SECRET" not in unit


def test_service_install_and_uninstall_leave_a_unit_they_did_not_write_alone(
    home: Path, tmp_path: Path,
) -> None:
    """Catches `service install` / `uninstall` replacing or deleting a messageweave.service
    the user wrote by hand (with their own options): it is refused, untouched."""
    unit_file = home / ".config" / UNIT
    unit_file.parent.mkdir(parents=True)
    unit_file.write_text("[Service]\nExecStart=/usr/bin/true\n")
    for args in (["install", "--data-dir", str(tmp_path / "d")], ["uninstall"]):
        done = _mw(home, "service", *args)
        assert done.returncode == 1 and "was not written by" in done.stdout, done.stdout
        assert unit_file.read_text() == "[Service]\nExecStart=/usr/bin/true\n"


def test_diagnose_says_whether_the_unit_is_installed_enabled_and_lingering(
    home: Path, tmp_path: Path,
) -> None:
    """Catches `diagnose` saying nothing of what keeps the instance running (issue #34, item 6):
    installed, enabled, linger, each with the command that is missing, and the unit's own
    start command for its stopped instance, read from the HOME the unit was installed in."""
    data_dir = tmp_path / "mw data"
    assert _mw(home, "service", "install", "--data-dir", str(data_dir)).returncode == 0
    out = _mw(home, "diagnose", "--data-dir", str(data_dir)).stdout
    assert "warn service: installed (" in out and "but not enabled" in out, out
    assert "→ systemctl --user daemon-reload && systemctl --user enable --now messageweave" in out
    # Never started: no embedded Redis yet. The remedy is the unit's, not a variable to set.
    assert "MessageWeave has not run on the data directory" in out, out
    assert "→ start it: `systemctl --user start messageweave`" in out, out

    if shutil.which("systemctl"):  # it only links the unit: no user manager needed
        enabled = subprocess.run(["systemctl", "--user", "enable", "messageweave"],
                                 env=_env(home), capture_output=True, text=True, timeout=60)
        assert enabled.returncode == 0, enabled.stderr
    else:  # what `systemctl --user enable` creates, where systemctl is not installed
        (home / ".config" / ENABLED).parent.mkdir(parents=True)
        (home / ".config" / ENABLED).symlink_to(home / ".config" / UNIT)
    out = _mw(home, "diagnose", "--data-dir", str(data_dir)).stdout
    if not Path("/var/lib/systemd/linger", getpass.getuser()).exists():
        assert "warn service: installed and enabled, linger off: it starts at your login" in out
        assert "→ loginctl enable-linger " in out, out
    status = _mw(home, "service", "status").stdout
    assert "warn instance: not running on" in status and "installed and enabled" in status

    other = _mw(home, "diagnose", "--data-dir", str(tmp_path / "elsewhere")).stdout
    assert "no data directory of `messageweave run`" in other, other

    removed = _mw(home, "service", "uninstall")
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert not (home / ".config" / UNIT).exists()
    assert not (home / ".config" / ENABLED).is_symlink()
    out = _mw(home, "diagnose", "--data-dir", str(data_dir)).stdout
    assert "ok   service: no systemd user unit" in out, out


def test_diagnose_on_a_run_data_directory_gives_its_remedies_running_and_stopped(
    home: Path, tmp_path: Path,
) -> None:
    """Catches `diagnose` speaking to containers only (issue #34, item 5): next to the data
    directory of `messageweave run` (what `scripts/run.sh` runs) it printed "environment:
    REDIS_URL and CONFIG_ENCRYPTION_KEY set" though neither was, and with the service stopped
    "check REDIS_URL and that Redis is running" where starting it again is what helps."""
    data_dir = (tmp_path / "mw").resolve()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [console_script("messageweave"), "run", "--port", str(port), "--data-dir",
         str(data_dir)], env=_env(home), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    try:
        wait_healthy(url, proc)
        out = _mw(home, "diagnose", "--data-dir", str(data_dir), cwd=tmp_path).stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert "REDIS_URL and CONFIG_ENCRYPTION_KEY set" not in out, out
    assert f"ok   environment: the data directory {data_dir} of `scripts/run.sh`" in out, out
    assert re.search(rf"ok   instance: running on {url} \(pid {proc.pid}, started by hand", out)
    assert "ok   service: no systemd user unit" in out, out
    assert f"save a configuration on the admin page ({url}/)" in out, out

    stopped = _mw(home, "diagnose", "--data-dir", str(data_dir), cwd=tmp_path)
    assert stopped.returncode == 1, stopped.stdout
    out = stopped.stdout
    assert "check REDIS_URL" not in out, out
    assert f"fail redis: unreachable (ConnectionError): MessageWeave is not running on " \
           f"{data_dir}" in out, out
    root = Path(messageweave.__file__).resolve().parents[2]  # the checkout run.sh is in
    root = root if (root / "scripts" / "run.sh").is_file() else None
    start = (f"cd {root} && scripts/run.sh --data-dir {data_dir} --port {port}" if root
             else f"messageweave run --data-dir {data_dir} --port {port}")
    assert f"→ start it: `{start}`" in out, out

    assert _mw(home, "service", "install", "--port", str(port), "--data-dir",
               str(data_dir)).returncode == 0
    out = _mw(home, "diagnose", "--data-dir", str(data_dir), cwd=tmp_path).stdout
    assert "→ start it: `systemctl --user start messageweave`" in out, out
