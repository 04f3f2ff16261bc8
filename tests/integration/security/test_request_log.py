"""Client disconnects and slow clients against the real server (issue #12, item 9)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from messageweave import server
from messageweave.app import create_app
from messageweave.server import (
    DEFAULT_PROTOCOL,
    GuardedConfig,
    GuardedH11Protocol,
    ReadLimits,
    serve,
)
from tests.helpers import ADMIN_KEY, console_script, free_port, serving, settings_for

# A body cut off mid-way, on a route that reads it once the credential passed (the admin key:
# `/push/jmap`, unauthenticated before issue #23, now refuses a post without its token unread).
PARTIAL_BODY = (b"POST /api/bootstrap HTTP/1.1\r\nHost: mw.test\r\n"
                b"Authorization: Bearer " + ADMIN_KEY.encode() + b"\r\n"
                b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"@type\":")


def _serve_env(redis_url: str, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG_ENABLED", "DEBUG_TOKEN")}
    env.update(REDIS_URL=redis_url, CONFIG_ENCRYPTION_KEY=ADMIN_KEY, PORT=str(port))
    return env


def _json_lines(path: Path) -> list[dict[str, Any]]:
    lines = []
    for raw in path.read_text().splitlines():
        if raw.startswith("{"):
            lines.append(json.loads(raw))
    return lines


def test_client_disconnect_mid_body_is_an_info_499_not_an_error_500(
    embedded_redis_url: str, tmp_path: Path,
) -> None:
    """Bug: a client that closed its connection while sending a body made Starlette raise
    ClientDisconnect, logged as an ERROR ("unhandled error") with a 500 request line."""
    port = free_port()
    log_file = tmp_path / "serve.log"
    with log_file.open("w") as sink:
        proc = subprocess.Popen(
            [console_script("messageweave"), "serve", "--host", "127.0.0.1"],
            env=_serve_env(embedded_redis_url, port), stdout=sink, stderr=sink, text=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, log_file.read_text()
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "service did not start"
            time.sleep(0.1)

        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(PARTIAL_BODY)
            time.sleep(0.3)  # the handler is now waiting for the rest of the body

        deadline = time.monotonic() + 10
        while not any(line.get("path") == "/api/bootstrap" for line in _json_lines(log_file)):
            assert time.monotonic() < deadline, log_file.read_text()
            time.sleep(0.05)
        time.sleep(0.3)  # an error line, if any, comes right after the request line
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
    lines = _json_lines(log_file)
    request = [line for line in lines if line.get("path") == "/api/bootstrap"]
    assert len(request) == 1
    assert request[0]["level"] == "info" and request[0]["status"] == 499, request
    errors = [line for line in lines if line["level"] in ("error", "critical")]
    assert errors == [], errors


# Both HTTP protocols the server can run (httptools is the default when it is installed).
PROTOCOLS = [pytest.param(GuardedH11Protocol, id="h11")]
if server.HTTPTOOLS:
    PROTOCOLS.insert(0, pytest.param(server.GuardedHttpToolsProtocol, id="httptools"))


@pytest.fixture(params=PROTOCOLS)
def protocol(request: pytest.FixtureRequest) -> type[asyncio.Protocol]:
    cls: type[asyncio.Protocol] = request.param
    return cls


@asynccontextmanager
async def _served(redis_url: str, limits: ReadLimits,
                  protocol: type[asyncio.Protocol]) -> AsyncIterator[int]:
    import uvicorn

    port = free_port()
    uvicorn_server = uvicorn.Server(GuardedConfig(
        create_app(settings_for(redis_url)), limits=limits, http=protocol, host="127.0.0.1",
        port=port, log_config=None, access_log=False, lifespan="on", timeout_graceful_shutdown=3,
    ))
    async with serving(uvicorn_server):
        yield port


async def _closed_after(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        trickle: bytes, limit: float) -> float:
    """Send `trickle` one byte every 0.1 s until the server closes the connection; the time
    it took (fails after `limit` seconds: the server kept the slow client)."""
    started = time.monotonic()
    for byte in trickle:
        if reader.at_eof() or time.monotonic() - started > limit:
            break
        try:
            writer.write(bytes([byte]))
            await writer.drain()
            data = await asyncio.wait_for(reader.read(1), 0.1)
            if data == b"":
                break
        except TimeoutError:
            continue
        except ConnectionError:
            break
    elapsed = time.monotonic() - started
    writer.close()
    assert elapsed < limit, f"the slow client was still connected after {elapsed:.1f} s"
    return elapsed


LIMITS = ReadLimits(header_timeout_s=0.8, body_timeout_s=1.0)


async def test_slow_headers_are_cut_off_after_the_header_timeout(
    embedded_redis_url: str, protocol: type[asyncio.Protocol],
) -> None:
    """Bug: uvicorn bounds only the idle time between requests, so a client that sent its
    headers a byte at a time (slowloris) held a connection forever."""
    async with _served(embedded_redis_url, LIMITS, protocol) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: mw.test\r\n")
        elapsed = await _closed_after(reader, writer, b"X-Slow: " + b"a" * 200, limit=4.0)
        assert elapsed >= LIMITS.header_timeout_s - 0.2

        # A connection that never sends anything is closed too.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(reader.read(), 4.0) == b""
        writer.close()


async def test_slow_body_is_cut_off_after_the_body_timeout_and_logged_499(
    embedded_redis_url: str, caplog: pytest.LogCaptureFixture, protocol: type[asyncio.Protocol],
) -> None:
    """Bug: a client that sent its body a byte at a time held the request's task and its
    connection forever; now the connection is closed and the request logged as 499."""
    caplog.set_level(logging.INFO)
    async with _served(embedded_redis_url, LIMITS, protocol) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(PARTIAL_BODY)
        elapsed = await _closed_after(reader, writer, b" " * 200, limit=4.0)
        assert elapsed >= LIMITS.body_timeout_s - 0.2
        deadline = time.monotonic() + 5
        while not [r for r in caplog.records if r.name == "messageweave.request"]:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
    fields = [getattr(r, "fields", {}) for r in caplog.records]
    assert {"event": "slow_client", "phase": "body", "timeout_s": 1.0} in fields
    request = [f for f in fields if f.get("event") == "request"]
    assert [(f["path"], f["status"]) for f in request] == [("/api/bootstrap", 499)]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_keep_alive_requests_within_the_deadlines_are_served(
    embedded_redis_url: str, protocol: type[asyncio.Protocol],
) -> None:
    """Bug guard: the deadlines must not cut off an ordinary client that reuses its
    connection, sends a body, or pauses between requests for less than the keep-alive."""
    async with _served(embedded_redis_url, LIMITS, protocol) as port, \
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", trust_env=False) as client:
        for _ in range(3):
            assert (await client.get("/healthz")).status_code == 200
            pushed = await client.post("/push/jmap", json={"@type": "Nothing"})
            assert pushed.status_code < 500
            await asyncio.sleep(LIMITS.header_timeout_s / 2)


async def test_pipelined_requests_are_all_answered_and_then_timed_again(
    embedded_redis_url: str, protocol: type[asyncio.Protocol],
) -> None:
    """Bug guard: httptools parses a pipelined request while the previous one is answered;
    its deadline must neither cut it off nor be lost (the connection is timed again after)."""
    async with _served(embedded_redis_url, LIMITS, protocol) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        push = (b"POST /push/jmap HTTP/1.1\r\nHost: mw.test\r\nContent-Type: application/json"
                b"\r\nContent-Length: 20\r\n\r\n" + b'{"@type": "Nothing"}')
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: mw.test\r\n\r\n" + push * 2)
        await writer.drain()
        answers = b""
        while answers.count(b"HTTP/1.1 ") < 3:
            chunk = await asyncio.wait_for(reader.read(65536), 4.0)
            assert chunk, answers
            answers += chunk
        assert answers.startswith(b"HTTP/1.1 200"), answers
        started = time.monotonic()
        assert await asyncio.wait_for(reader.read(), 4.0) == b""  # idle: closed again
        assert time.monotonic() - started < LIMITS.header_timeout_s + 1.0
        writer.close()


async def test_unfinished_headers_past_the_size_limit_are_a_400(
    embedded_redis_url: str, protocol: type[asyncio.Protocol],
) -> None:
    """Bug: uvicorn's httptools protocol has no limit on request headers (h11's is
    `h11_max_incomplete_event_size`), so a client could make the server buffer them without
    end; past `max_header_bytes` both protocols answer 400 and close the connection."""
    async with _served(embedded_redis_url, LIMITS, protocol) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: mw.test\r\n")
        for _ in range(LIMITS.max_header_bytes // 1024 + 1):
            writer.write(b"X-Big: " + b"a" * 1024 + b"\r\n")
            await writer.drain()
            await asyncio.sleep(0.01)
        answer = await asyncio.wait_for(reader.read(), 4.0)
        assert answer.startswith(b"HTTP/1.1 400"), answer
        writer.close()

        # Headers just under the limit are still served.
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}",
                                     trust_env=False) as client:
            big = {"X-Big": "a" * (LIMITS.max_header_bytes - 1024)}
            assert (await client.get("/healthz", headers=big)).status_code == 200


def test_run_and_serve_use_the_documented_timeouts() -> None:
    """Bug guard: the numbers in reference §4 are the ones the server runs with, on httptools
    when it is installed."""
    limits = ReadLimits()
    config = GuardedConfig(create_app(settings_for("")), limits=limits)
    assert config.http is DEFAULT_PROTOCOL
    assert DEFAULT_PROTOCOL is (server.GuardedHttpToolsProtocol if server.HTTPTOOLS
                                else GuardedH11Protocol)
    assert config.timeout_keep_alive == limits.keep_alive_s
    assert config.h11_max_incomplete_event_size == limits.max_header_bytes
    assert serve.__defaults__ == (None,)  # `run` and `serve` pass no limits: the defaults
    reference = (Path(__file__).parents[3] / "docs" / "reference.md").read_text()
    documented = re.search(r"Slow clients.*?(?=\n\n)", reference, re.S)
    assert documented, "reference.md has no 'Slow clients' paragraph"
    text = documented.group(0)
    for number in (f"{limits.header_timeout_s:g} s", f"{limits.body_timeout_s:g} s",
                   f"{limits.keep_alive_s} s", f"{limits.max_header_bytes // 1024} KiB"):
        assert number in text, number
