"""`messageweave bootstrap` against a running `messageweave serve`, which logs JSON lines."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import httpx
import redis.asyncio as aioredis

from tests.conftest import ADMIN_KEY, console_script, free_port, sample_wire
from tests.integration.ops.test_diagnose_cli import run_cli


async def _wait_healthy(url: str, proc: asyncio.subprocess.Process) -> None:
    async with httpx.AsyncClient() as http:
        for _ in range(200):
            assert proc.returncode is None, "serve exited early"
            try:
                if (await http.get(url + "/healthz", timeout=1)).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError("serve did not start")


async def test_bootstrap_stores_the_file_once_and_serve_logs_json_lines(
    redis_client: aioredis.Redis, embedded_redis_url: str, tmp_path: Path,
) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG_ENABLED", "DEBUG_TOKEN")}
    env.update(REDIS_URL=embedded_redis_url, CONFIG_ENCRYPTION_KEY=ADMIN_KEY, PORT=str(port))
    proc = await asyncio.create_subprocess_exec(
        console_script("messageweave"), "serve", "--host", "127.0.0.1", env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    config = tmp_path / "config.json"
    config.write_text(json.dumps(sample_wire()))
    try:
        await _wait_healthy(url, proc)
        code, out = await run_cli("bootstrap", "--file", str(config), "--url", url,
                                  CONFIG_ENCRYPTION_KEY=ADMIN_KEY)
        assert code == 0, out
        assert "configuration stored (revision 1)" in out
        assert "warn jmap connect" in out  # sample_wire's JMAP server is a closed port
        code, out = await run_cli("bootstrap", "--file", str(config), "--url", url,
                                  CONFIG_ENCRYPTION_KEY=ADMIN_KEY)
        assert code == 1 and "already configured" in out
        code, out = await run_cli("bootstrap", "--file", str(config), "--url", url,
                                  CONFIG_ENCRYPTION_KEY="cd" * 32)
        assert code == 1 and "HTTP 401: unauthorized" in out
    finally:
        proc.terminate()
        _, err = await asyncio.wait_for(proc.communicate(), 20)
    lines = [json.loads(line) for line in err.decode().splitlines() if line.startswith("{")]
    bootstraps = [line for line in lines if line.get("path") == "/api/bootstrap"]
    assert [line["status"] for line in bootstraps] == [200, 409, 401]
    assert ADMIN_KEY not in err.decode() and "worker-token-SECRET" not in err.decode()
