"""`messageweave run` and `messageweave serve` as a user starts them."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import console_script, free_port, sample_wire, wait_healthy


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
