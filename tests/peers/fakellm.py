"""The LLM peer: `fakellm` (PyPI, OpenAI-compatible, rule-driven) as a real local process.

`fakellm_server` (session fixture) serves fakellm's app (`fakellm.server:app`, what
`fakellm serve` runs) on a free 127.0.0.1 port with `RULES` below. Scenarios are picked by the
configured model name, because the service sends no custom headers: `summarizer` answers
`SUMMARY`, `verbose` answers a text longer than 300 characters, `rate-limited` answers 429,
`broken` answers 500 and `slow-<ms>` (`slow_model()`) answers `SUMMARY` `<ms>` milliseconds late.
A request whose user message still holds `TAIL_MARKER` (put past the input bound) answers
`UNBOUNDED_ANSWER`; one without our instruction falls through to fakellm's deterministic echo.

`redirect-<status>` (301, 302, 303, 307, 308; issue #23) answers that redirect, before fakellm
sees the request, to the same path under `MOVED_PREFIX`: that path stands in for another host.
Whatever reaches it is answered with a chat completion of `MOVED_ANSWER` and recorded (the last
user message, and whether an `Authorization` header came with it), readable with `moved()`
(`/_fakellm/moved`), so a test can tell whether a client re-sent the prompt after a redirect.

`requests()` reads fakellm's own request log (`/_fakellm/stats`): the count per rule and the
most recent requests (model, matched rule, conversation id = hash of the first user message).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

SUMMARY = "摘要：Alice 请你在周五前确认三月发票，金额 1200 元。"
VERBOSE_ANSWER = "长" * 450
UNBOUNDED_ANSWER = "UNBOUNDED INPUT REACHED THE MODEL"
TAIL_MARKER = "TAIL-BEYOND-THE-INPUT-LIMIT"
INSTRUCTION_MARKER = "about 300 characters"
MOVED_PREFIX = "/_moved"
MOVED_ANSWER = "THE PROMPT WAS RE-SENT AFTER A REDIRECT"

RULES = f"""\
version: 1
defaults:
  fallback: deterministic_echo
rules:
  - name: rate_limit
    when:
      model_matches: rate-limited
    respond:
      status: 429
      error: "Rate limit exceeded (mock)"
  - name: server_error
    when:
      model_matches: broken
    respond:
      status: 500
      error: "upstream exploded (mock)"
  - name: unbounded
    when:
      messages_contain: "{TAIL_MARKER}"
    respond:
      content: "{UNBOUNDED_ANSWER}"
  - name: verbose
    when:
      model_matches: verbose
      messages_contain: "{INSTRUCTION_MARKER}"
    respond:
      content: "{VERBOSE_ANSWER}"
  - name: slow
    when:
      model_matches: "slow-*"
      messages_contain: "{INSTRUCTION_MARKER}"
    respond:
      content: "{SUMMARY}"
  - name: summary
    when:
      model_matches: summarizer
      messages_contain: "{INSTRUCTION_MARKER}"
    respond:
      content: "{SUMMARY}"
"""
_STARTUP_TIMEOUT_S = 20.0

# fakellm has no latency setting, and a real API under load is simply slow: it takes the request
# and answers late. So fakellm's own app is served with two additions: the answer to a request for
# a model named `slow-<ms>` is held back <ms> milliseconds (fakellm handles and counts the request
# at once; only the answer is late), and `redirect-<status>` is redirected to the moved path
# (module docstring), which fakellm never sees.
_LAUNCHER = """
import asyncio, json, os, sys
import uvicorn
from starlette.responses import JSONResponse, Response

host, port, config = sys.argv[1], int(sys.argv[2]), sys.argv[3]
moved_prefix, moved_answer = sys.argv[4], sys.argv[5]
os.environ["FAKELLM_CONFIG"] = config
from fakellm.server import app

moved = []


def last_user_message(body):
    users = [m.get("content") for m in body.get("messages", []) if m.get("role") == "user"]
    return users[-1] if users else None


@app.middleware("http")
async def answer_late(request, call_next):
    try:
        body = json.loads(await request.body())
        model = str(body.get("model", ""))
    except (ValueError, AttributeError):
        body, model = {}, ""
    path = request.url.path
    if path == "/_fakellm/moved":
        return JSONResponse(moved)
    if path.startswith(moved_prefix + "/"):
        moved.append({"user": last_user_message(body),
                      "authorized": "authorization" in request.headers})
        return JSONResponse({"id": "moved", "object": "chat.completion", "created": 0,
                             "model": model, "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": moved_answer}}]})
    status = model.removeprefix("redirect-")
    if status in ("301", "302", "303", "307", "308"):
        return Response(status_code=int(status),
                        headers={"location": f"http://{host}:{port}{moved_prefix}{path}"})
    response = await call_next(request)
    if model.startswith("slow-") and model[5:].isdigit():
        await asyncio.sleep(int(model[5:]) / 1000)
    return response


uvicorn.run(app, host=host, port=port)
"""


def slow_model(delay_ms: int) -> str:
    """The model name that makes fakellm answer `delay_ms` late."""
    return f"slow-{delay_ms}"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class FakeLlm:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """What `llm_base_url` is set to (the SDK appends `/chat/completions`)."""
        return f"{self.origin}/v1"

    async def stats(self) -> dict[str, Any]:
        async with httpx.AsyncClient(trust_env=False, timeout=5) as client:
            response = await client.get(f"{self.origin}/_fakellm/stats")
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    async def total_requests(self) -> int:
        return int((await self.stats())["total_requests"])

    async def requests_by_rule(self) -> dict[str, int]:
        return {str(k): int(v) for k, v in (await self.stats())["by_rule"].items()}

    async def moved(self) -> list[dict[str, Any]]:
        """What reached the moved path (a `redirect-<status>` model's target), oldest first:
        `{"user": <the last user message>, "authorized": <an Authorization header came>}`."""
        async with httpx.AsyncClient(trust_env=False, timeout=5) as client:
            response = await client.get(f"{self.origin}/_fakellm/moved")
        response.raise_for_status()
        data: list[dict[str, Any]] = response.json()
        return data

    @classmethod
    def start(cls, directory: Path) -> FakeLlm:
        rules = directory / "fakellm.yaml"
        rules.write_text(RULES, encoding="utf-8")
        port = _free_port()
        log_path = directory / "fakellm.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-c", _LAUNCHER, "127.0.0.1", str(port), str(rules),
                 MOVED_PREFIX, MOVED_ANSWER],
                stdout=log, stderr=subprocess.STDOUT, cwd=directory,
            )
        server = cls(process, port, log_path)
        deadline = time.monotonic() + _STARTUP_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError("fakellm exited: " + log_path.read_text(errors="replace"))
            try:
                if httpx.get(f"{server.origin}/_fakellm/stats", timeout=1,
                             trust_env=False).status_code == 200:
                    return server
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                server.stop()
                raise RuntimeError("fakellm did not start: " + log_path.read_text())
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


@pytest.fixture(scope="session")
def fakellm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeLlm]:
    server = FakeLlm.start(tmp_path_factory.mktemp("fakellm"))
    try:
        yield server
    finally:
        server.stop()
