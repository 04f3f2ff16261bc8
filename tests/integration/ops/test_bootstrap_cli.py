"""`messageweave bootstrap` against a running `messageweave serve`, which logs JSON lines."""

from __future__ import annotations

import json
from pathlib import Path

import redis.asyncio as aioredis

from tests.helpers import ADMIN_KEY, run_cli, sample_wire, serve_process


async def test_bootstrap_stores_the_file_once_and_serve_logs_json_lines(
    redis_client: aioredis.Redis, embedded_redis_url: str, tmp_path: Path,
) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(sample_wire()))
    async with serve_process(embedded_redis_url) as served:
        url = served.url
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
    err = served.stderr
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    bootstraps = [line for line in lines if line.get("path") == "/api/bootstrap"]
    assert [line["status"] for line in bootstraps] == [200, 409, 401]
    assert ADMIN_KEY not in err and "worker-token-SECRET" not in err
