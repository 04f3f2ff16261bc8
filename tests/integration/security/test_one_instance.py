"""One data directory, one `messageweave run` (issue #32, finding 8): a second start on a running
instance's data directory stops, naming the first, and leaves its Redis alone; the running
instance restarts its embedded Redis when that dies; a lock whose owner was killed is taken.

Real processes throughout: `scripts/run.sh` (with its install step stubbed: it would build a
venv), `messageweave run`, the embedded redis-server, Cyrus and the Bot API emulator."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import redis

from messageweave.store.redis import embedded_url
from tests.helpers import (
    ADMIN_KEY,
    admin_headers,
    console_script,
    eventually_sync,
    free_port,
    wait_healthy,
)
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator
from tests.served import peer_wire

ROOT = Path(__file__).resolve().parents[3]
RESTART_WITHIN_S = 15.0  # "within seconds": the restart itself takes well under one


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("REDIS_URL", "CONFIG_ENCRYPTION_KEY", "PORT", "DEBUG_ENABLED",
                        "DEBUG_TOKEN", "XDG_DATA_HOME")}
    env.update(COLUMNS="200", **extra)
    return env


@dataclass
class _Service:
    proc: subprocess.Popen[str]
    output: str = ""  # all it printed and logged, once it has stopped

    @property
    def pid(self) -> int:
        return self.proc.pid


@contextmanager
def _running(args: list[str], env: dict[str, str], cwd: Path | None = None,
             ) -> Iterator[_Service]:
    """A started service, healthy on its `--port`; SIGTERM when the block ends."""
    port = args[args.index("--port") + 1]
    service = _Service(subprocess.Popen(args, env=env, cwd=cwd, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True))
    try:
        wait_healthy(f"http://127.0.0.1:{port}", service.proc)
        yield service
    finally:
        if service.proc.poll() is None:
            service.proc.send_signal(signal.SIGTERM)
        service.output = service.proc.communicate(timeout=30)[0]


def _run(data_dir: Path, port: int) -> list[str]:
    return [console_script("messageweave"), "run", "--port", str(port), "--data-dir",
            str(data_dir)]


def _project(tmp_path: Path) -> Path:
    """A checkout as the README's user has it: the real scripts/run.sh; its install step a
    stub (the package is already installed) and `.venv/bin/messageweave` the installed one."""
    project = tmp_path / "checkout"
    (project / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts/run.sh", project / "scripts/run.sh")
    (project / "scripts/install.sh").write_text("exit 0\n")
    (project / ".venv/bin").mkdir(parents=True)
    (project / ".venv/bin/messageweave").symlink_to(console_script("messageweave"))
    return project


def _configure(url: str, cyrus: CyrusServer, emulator: TelegramEmulator) -> None:
    """The stored configuration against the real peers, then `/ready` 200."""
    session = httpx.post(url + "/api/admin/session", headers=admin_headers(), timeout=10)
    assert session.status_code == 200, session.text
    saved = httpx.put(url + "/api/business-config", json=peer_wire(cyrus, emulator), timeout=30,
                      headers={"Authorization": f"Bearer {session.json()['session']}"})
    assert saved.status_code == 200, saved.text
    eventually_sync(lambda: _ready(url) == 200, "/ready 200")


def _ready(url: str) -> int:
    try:
        return httpx.get(url + "/ready", timeout=10).status_code
    except httpx.HTTPError:
        return 0


def _redis_pid(data_dir: Path) -> int:
    return int((data_dir / "redis" / "redis.pid").read_text())


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, killed and not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_second_start_on_a_running_data_dir_says_already_running_and_leaves_the_first_ready(
    tmp_path: Path, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
) -> None:
    """Catches: a second `scripts/run.sh` answered `port 8080 is in use: try --port 8081`;
    following that hint started a second instance on the same data directory, which took the
    first one's embedded Redis for stale and stopped it: the first stayed at `/ready` 503."""
    project = _project(tmp_path)
    data_dir = project / ".messageweave"  # run.sh's default, from the checkout
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = _env(CONFIG_ENCRYPTION_KEY=ADMIN_KEY, PYTHON=sys.executable,
               SSL_CERT_FILE=str(cyrus.ca_file))
    run_sh = ["bash", "scripts/run.sh"]
    with _running([*run_sh, "--port", str(port)], env, cwd=project) as first:
        _configure(url, cyrus, telegram_emulator)
        redis_pid = _redis_pid(data_dir)
        socket = Path((data_dir / "redis/redis.socket-path").read_text().strip())
        before = {path: path.stat() for path in (socket, data_dir / "redis/redis.password",
                                                 data_dir / "redis/redis.socket-path")}

        # Again as the README says, then as the old hint said (another port, same directory).
        for args in ([], ["--port", str(port)], ["--port", str(free_port())]):
            second = subprocess.run([*run_sh, *args], env={**env, "PORT": str(port)},
                                    cwd=project, capture_output=True, text=True, timeout=60)
            assert second.returncode != 0, second.stdout
            assert second.stderr == (f"MessageWeave is already running on {url} "
                                     f"(pid {first.pid})\n"), second.stderr
            assert second.stdout == ""

        assert _redis_pid(data_dir) == redis_pid and _alive(redis_pid)
        assert {path: path.stat() for path in before} == before  # not even re-created
        ready = httpx.get(url + "/ready", timeout=10)
        assert ready.status_code == 200 and ready.json()["redis"] is True, ready.text


def test_the_service_restarts_its_embedded_redis_after_kill_9(
    tmp_path: Path, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
) -> None:
    """Catches: when the embedded redis-server died (kill -9, a crash, another process stopping
    it), `run` left it dead: `/ready` answered 503 `x-ready-failed: redis` for good and
    notifications silently stopped."""
    data_dir = tmp_path / "data"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = _env(CONFIG_ENCRYPTION_KEY=ADMIN_KEY, SSL_CERT_FILE=str(cyrus.ca_file))
    with _running(_run(data_dir, port), env) as service:
        _configure(url, cyrus, telegram_emulator)
        old = _redis_pid(data_dir)
        first_url = embedded_url(data_dir / "redis") or ""
        with redis.Redis.from_url(first_url) as client:
            client.set("written-before-the-kill", "kept")

        os.kill(old, signal.SIGKILL)
        eventually_sync(lambda: not _alive(old), "the killed redis-server gone")
        eventually_sync(lambda: _redis_pid(data_dir) != old and _ready(url) == 200,
                        "/ready 200 again with a new redis-server", RESTART_WITHIN_S)

        new = _redis_pid(data_dir)
        assert _alive(new) and embedded_url(data_dir / "redis") == first_url  # same socket
        children = Path(f"/proc/{service.pid}/task").glob("*/children")
        assert new in {int(pid) for path in children for pid in path.read_text().split()}
        with redis.Redis.from_url(first_url) as client:  # the AOF was replayed
            assert client.get("written-before-the-kill") == b"kept"
    output = service.output
    assert service.proc.returncode == 0, output
    restarts = [line for line in output.splitlines() if "redis-server died" in line]
    assert len(restarts) == 1 and "killed by signal 9" in restarts[0], output
    assert not _alive(new), "the restarted Redis outlived the service"


def test_ctrl_c_in_the_terminal_stops_the_service_and_its_redis_without_a_restart(
    tmp_path: Path,
) -> None:
    """Catches: Ctrl-C reaches the terminal's whole foreground process group; with the embedded
    Redis in it, Redis died at the same moment as the service began its graceful shutdown, and
    the service took that for a crash and restarted it (or shut down with Redis gone)."""
    data_dir = tmp_path / "data"
    port = free_port()
    args = _run(data_dir, port)
    proc = subprocess.Popen(args, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)  # its own group, as a shell's job
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        redis_pid = _redis_pid(data_dir)
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
        output = proc.communicate(timeout=30)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    assert proc.returncode == 0, output
    assert "redis-server died" not in output, output
    assert not _alive(redis_pid)
    assert not (data_dir / "redis/redis.pid").exists()  # a clean stop removes it: none running


def test_a_lock_left_by_a_killed_run_is_taken_over_and_names_the_new_owner(
    tmp_path: Path,
) -> None:
    """Catches: a lock that outlives its owner (a pid file, a lock checked by existence) keeps
    a killed instance's data directory unusable, and one that names the dead owner sends the
    user to a page that is gone. Also the lock itself: without it a third start on the
    directory stops the second's Redis."""
    data_dir = tmp_path / "data"
    with _running(_run(data_dir, free_port()), _env()) as killed:
        redis_pid = _redis_pid(data_dir)
        killed.proc.kill()  # kill -9 of the service: nothing of ours runs on the way out
        killed.proc.wait(timeout=10)
    port = free_port()
    with _running(_run(data_dir, port), _env()) as taker:
        assert not _alive(redis_pid)  # the dead owner's Redis was stopped, and a new one runs
        assert _alive(_redis_pid(data_dir)) and _redis_pid(data_dir) != redis_pid
        third = subprocess.run(_run(data_dir, free_port()), env=_env(), capture_output=True,
                               text=True, timeout=60)
        assert third.returncode != 0
        assert re.fullmatch(rf"MessageWeave is already running on http://127\.0\.0\.1:{port} "
                            rf"\(pid {taker.pid}\)\n", third.stderr), third.stderr
        assert _ready_failed(f"http://127.0.0.1:{port}") == "configured"  # Redis answers


def _ready_failed(url: str) -> str | None:
    """What `/ready` found failing first (`redis` when Redis does not answer)."""
    return httpx.get(url + "/ready", timeout=10).headers.get("x-ready-failed")
