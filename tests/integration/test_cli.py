"""`messageweave run` and `messageweave serve` as a user starts them, and the operator commands
finding the instance `run` started from its data directory alone."""

import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import redis

from messageweave.store import keys
from messageweave.store.redis import PASSWORD_FILE, SOCKET_POINTER_FILE, embedded_url
from tests.helpers import console_script, free_port, sample_wire, wait_healthy


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("REDIS_URL", "CONFIG_ENCRYPTION_KEY", "PORT", "DEBUG_ENABLED",
                        "DEBUG_TOKEN")}
    env.update(extra)
    return env


def _start_run(data_dir: Path, port: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [console_script("messageweave"), "run", "--port", str(port), "--data-dir", str(data_dir)],
        env=_env(COLUMNS="200"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def _redis_pid(data_dir: Path) -> int:
    return int((data_dir / "redis" / "redis.pid").read_text().strip())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "mw"


def test_run_starts_embedded_redis_and_survives_kill_9(data_dir: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _start_run(data_dir, port)
    try:
        wait_healthy(url, proc)
        key_file = data_dir / "encryption.key"
        key = key_file.read_text().strip()
        assert len(key) == 64 and (key_file.stat().st_mode & 0o777) == 0o600
        status = httpx.get(url + "/api/status").json()
        assert status["ready"] is True and status["mode"] == "configured"
        session = httpx.post(url + "/api/admin/session",
                             headers={"Authorization": f"Bearer {key}"}).json()["session"]
        auth = {"Authorization": f"Bearer {session}"}
        saved = httpx.put(url + "/api/business-config", json=sample_wire(), headers=auth,
                          timeout=10)
        assert saved.status_code == 200, saved.text
        redis_pid = _redis_pid(data_dir)
    finally:
        proc.send_signal(signal.SIGKILL)
        output = proc.communicate(timeout=10)[0]
    assert key in output and url + "/" in output  # the key is printed on first start
    deadline = time.monotonic() + 10
    while _alive(redis_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(redis_pid), "embedded Redis outlived its killed parent"

    proc = _start_run(data_dir, port)
    try:
        wait_healthy(url, proc)
        session = httpx.post(url + "/api/admin/session",
                             headers={"Authorization": f"Bearer {key}"}).json()["session"]
        body = httpx.get(url + "/api/business-config",
                         headers={"Authorization": f"Bearer {session}"}).json()
        assert body["configured"] is True and body["values"]["jmap_username"] == "alice"
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=20)[0]
    assert key not in output  # printed once, on generation only
    assert proc.returncode == 0


def test_serve_without_environment_serves_setup_mode() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [console_script("messageweave"), "serve", "--host", "127.0.0.1"],
        env=_env(PORT=str(port), CONFIG_ENCRYPTION_KEY="too-short"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        status = httpx.get(url + "/api/status").json()
        assert status["mode"] == "configuration-setup"
        assert status["missing"] == ["REDIS_URL", "CONFIG_ENCRYPTION_KEY"]
        assert httpx.get(url + "/ready").status_code == 503
        response = httpx.post(url + "/api/bootstrap", content=json.dumps(sample_wire()))
        assert response.status_code == 404
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)


@pytest.mark.parametrize("how", ["--port", "PORT"])
def test_run_refuses_a_busy_port_before_printing_or_starting_redis(
    data_dir: Path, how: str,
) -> None:
    """Bug: with the port taken, `run` started the embedded Redis, printed the page URL, then
    died with a JSON error line and exit 3, leaving the user to guess another port."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        args = ["--port", str(port)] if how == "--port" else []
        extra = {"PORT": str(port)} if how == "PORT" else {}
        result = subprocess.run(
            [console_script("messageweave"), "run", *args, "--data-dir", str(data_dir)],
            env=_env(**extra), capture_output=True, text=True, timeout=30,
        )
    match = re.fullmatch(rf"port {port} is in use: try --port (\d+)\n", result.stderr)
    assert match, result.stderr
    assert result.returncode != 0 and result.stdout == ""
    assert not data_dir.exists(), "Redis or the key was set up for a run that cannot start"
    suggested = int(match[1])
    assert suggested > port
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", suggested))  # the hint names a port that is free


def test_run_prints_where_its_state_is_and_the_commands_find_it_with_data_dir(
    data_dir: Path, tmp_path: Path,
) -> None:
    """Bugs: `run` never said where the key and the Redis socket were, nor how to check the
    instance; and `drain` / `dlq` had no --data-dir, so they failed with "missing REDIS_URL,
    CONFIG_ENCRYPTION_KEY" next to a running embedded instance."""
    port = free_port()
    proc = _start_run(data_dir, port)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        redis_dir = data_dir / "redis"
        client = redis.Redis.from_url(embedded_url(redis_dir) or "", decode_responses=True)
        try:
            dead = client.xadd(keys.dlq(keys.STREAM_JMAP),
                               {"failure_class": "permanent", "reason": "test", "attempts": "3"})
        finally:
            client.close()
        elsewhere = tmp_path / "elsewhere"  # no ./.messageweave here: the flag must be used
        elsewhere.mkdir()

        def command(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([console_script("messageweave"), *args], cwd=elsewhere,
                                  env=_env(COLUMNS="200"), capture_output=True, text=True,
                                  timeout=60)

        listed = command("dlq", "list", "--data-dir", str(data_dir))
        assert listed.returncode == 0, listed.stdout + listed.stderr
        assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == [dead]
        drained = command("drain", "--once", "--data-dir", str(data_dir))
        assert drained.returncode == 0, drained.stdout + drained.stderr
        assert json.loads(drained.stdout)["processed"] == 0
        unfound = command("dlq", "list")
        assert unfound.returncode == 1 and "missing REDIS_URL" in unfound.stdout, unfound
        password = (redis_dir / PASSWORD_FILE).read_text().strip()
        socket_path = (redis_dir / SOCKET_POINTER_FILE).read_text().strip()
        key = (data_dir / "encryption.key").read_text().strip()
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=20)[0]
    assert proc.returncode == 0, output
    directory = data_dir.resolve()
    assert f"Data directory: {directory}\n" in output
    assert f"Key file:       {directory / 'encryption.key'}\n" in output
    assert f"Redis socket:   {socket_path}\n" in output
    assert re.search(rf"Check it with:  \S*messageweave diagnose --data-dir {directory}\n",
                     output), output
    assert password not in output
    assert output.count(key) == 1  # only in the one-time "Admin key generated" notice
