"""`messageweave serve` replaces its process with the lean serving interpreter
(`messageweave.cli.serving`), keeping its pid, environment and options."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import httpx

from tests.helpers import ADMIN_KEY, console_script, free_port, wait_healthy

DEBUG_TOKEN = "debug-token-for-the-exec-test-0123456789"


def test_serve_serves_from_the_serving_interpreter_with_its_pid_and_options(
    embedded_redis_url: str,
) -> None:
    """Bug (issue #14): `serve` served from the process that parsed its options, which kept
    Typer and every command module (~1.8 MB of idle RSS). The exec must keep what a container
    relies on: the pid its signals go to, the environment, `--host` and `--debug`, exit 0 on
    SIGTERM; and `-P`, so the working directory does not shadow the installed package."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG_ENABLED", "DEBUG_TOKEN")}
    env.update(REDIS_URL=embedded_redis_url, CONFIG_ENCRYPTION_KEY=ADMIN_KEY, PORT=str(port),
               DEBUG_TOKEN=DEBUG_TOKEN)
    proc = subprocess.Popen(
        [console_script("messageweave"), "serve", "--host", "127.0.0.1", "--debug"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        argv = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode().split("\0")[:-1]
        assert argv[1:] == ["-P", "-m", "messageweave.cli.serving", "serve", "--host",
                            "127.0.0.1", "--debug"]
        debug = httpx.get(url + "/debug/ping", timeout=5,
                          headers={"Authorization": f"Bearer {DEBUG_TOKEN}"})
        assert debug.status_code == 200, debug.text
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=20)[0]
    assert proc.returncode == 0, output
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    assert any(line.get("message") == "GET /healthz 200" for line in lines), output  # its own


def test_run_hands_its_redis_to_the_serving_interpreter_which_stops_it(tmp_path: Path) -> None:
    """Bug (issue #14): `run`, the README's one command, served from the process that parsed
    its options (Typer and every command module: ~2.6 MB more idle RSS than `serve`). It now
    becomes the serving interpreter too, which must take its embedded Redis over: the Redis is
    still this pid's child while serving, and SIGTERM stops both (no redis-server left behind,
    exit 0) — an orphaned Redis would hold the data directory against the next start."""
    port = free_port()
    env = {k: v for k, v in os.environ.items()
           if k not in ("REDIS_URL", "CONFIG_ENCRYPTION_KEY", "DEBUG_ENABLED", "DEBUG_TOKEN")}
    proc = subprocess.Popen(
        [console_script("messageweave"), "run", "--port", str(port), "--data-dir",
         str(tmp_path)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        argv = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode().split("\0")[:-1]
        assert argv[1:4] == ["-P", "-m", "messageweave.cli.serving"], argv
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        [redis_pid] = [int(c) for c in children]
        assert b"redis-server" in Path(f"/proc/{redis_pid}/cmdline").read_bytes()
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=30)[0]
    assert proc.returncode == 0, output
    assert not Path(f"/proc/{redis_pid}").exists(), "the embedded Redis outlived run"
    assert (tmp_path / "redis" / "appendonly.aof").exists() or \
        any((tmp_path / "redis").glob("appendonly*")), output
