"""Schemathesis against a live instance: every route of the published schema, generated valid and
invalid requests, without credentials and with valid ones.

The service runs under uvicorn on a loopback port on the session's embedded Redis, with a saved
configuration whose JMAP and Telegram servers are closed loopback ports (so peer calls fail fast
and the documented 502/503 answers are allowed; a 500 never is).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import redis
import schemathesis
import uvicorn
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.generation import GenerationMode

from messageweave.api.openapi import OPERATIONS
from messageweave.app import create_app
from messageweave.settings import Settings
from messageweave.store import keys
from tests.helpers import (
    ADMIN_KEY,
    DEBUG_TOKEN,
    admin_headers,
    closed_port,
    free_port,
    running_client,
    sample_wire,
    settings_for,
)

# Generated requests per operation and mode (valid, invalid inputs). The default keeps the
# suite fast and still calls every operation in both modes; `MW_FUZZ_EXAMPLES=100` is the deep
# run (README: testing).
FUZZ_EXAMPLES_ENV = "MW_FUZZ_EXAMPLES"
EXAMPLES_PER_OPERATION = int(os.environ.get(FUZZ_EXAMPLES_ENV) or 4)
WIRE = sample_wire(telegram_api_base_url=f"https://127.0.0.1:{closed_port()}")
SECRETS = [str(WIRE[name]) for name in ("bot_token", "telegram_webhook_secret", "jmap_password",
                                        "reconcile_token", "worker_token")]
SECRETS += [ADMIN_KEY, DEBUG_TOKEN]


class LiveService:
    """The real ASGI app under uvicorn in a background thread (its own event loop)."""

    def __init__(self, redis_url: str) -> None:
        self.base_url = ""
        self.redis_url = redis_url
        app = create_app(settings_for(redis_url, debug_requested=True, debug_token=DEBUG_TOKEN))
        port = free_port()
        self.base_url = f"http://127.0.0.1:{port}"
        # One client for the fuzz's own calls: each new one loads certifi (40 ms of CPU).
        self.http = httpx.Client(base_url=self.base_url)
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None,
                                log_level="warning", lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="uvicorn", daemon=True)

    def __enter__(self) -> LiveService:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            assert self._thread.is_alive() and time.monotonic() < deadline, "service not up"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self.http.close()


@pytest.fixture
def live(embedded_redis_url: str) -> Iterator[LiveService]:
    sync = redis.Redis.from_url(embedded_redis_url)
    sync.flushdb()
    sync.close()
    with LiveService(embedded_redis_url) as service:
        auth = {"Authorization": f"Bearer {_session(service)}"}
        assert service.http.put("/api/business-config", json=WIRE, headers=auth).status_code \
            == 200
        assert service.http.put("/api/enabled", json={"enabled": True}, headers=auth).is_success
        account = {"id": "family", "name": "Family", "telegram_chat_id": 5151,
                   "chat_allowlist": [5151], "jmap_session_url": WIRE["jmap_session_url"],
                   "jmap_username": "bob", "jmap_password": "family-SECRET"}
        assert service.http.post("/api/accounts", json=account, headers=auth).status_code == 201
        yield service


def _session(live: LiveService) -> str:
    answer = live.http.post("/api/admin/session", headers=admin_headers())
    assert answer.status_code == 200, answer.text
    token: str = answer.json()["session"]
    return token


def _unlock(live: LiveService) -> None:
    with redis.Redis.from_url(live.redis_url) as client:
        client.delete(*(key("127.0.0.1") for key in (keys.throttle_failures, keys.throttle_lock)))


def _enable(live: LiveService) -> None:
    auth = {"Authorization": f"Bearer {_session(live)}"}
    answer = live.http.put("/api/enabled", json={"enabled": True}, headers=auth)
    assert answer.status_code == 200, answer.text


def valid_credentials(live: LiveService, path: str) -> dict[str, str]:
    """The credential each route expects (a fresh admin session for the operator routes)."""
    if path == "/webhook/tg":
        return {"X-Telegram-Bot-Api-Secret-Token": WIRE["telegram_webhook_secret"]}
    token = {"/worker": WIRE["worker_token"], "/reconcile": WIRE["reconcile_token"],
             "/api/bootstrap": ADMIN_KEY, "/api/admin/session": ADMIN_KEY}.get(path)
    if path == "/api/owner/session":  # a fresh owner key of the account the fixture made
        made = live.http.post("/api/accounts/family/owner-key",
                              headers={"Authorization": f"Bearer {_session(live)}"})
        token = made.json()["owner_key"] if made.status_code == 200 else "no-account-left"
    if path == "/api/owner/session/revoke":  # an owner's own sign-out
        made = live.http.post("/api/accounts/family/owner-key",
                              headers={"Authorization": f"Bearer {_session(live)}"})
        opened = live.http.post("/api/owner/session", headers={
            "Authorization": f"Bearer {made.json().get('owner_key')}"})
        token = opened.json()["session"] if opened.status_code == 200 else "no-account-left"
    if token is None:
        token = DEBUG_TOKEN if path.startswith("/debug/") else _session(live)
    return {"Authorization": f"Bearer {token}"}


def assert_well_behaved(response: Any, label: str) -> None:
    status = response.status_code
    text = response.content.decode("utf-8", "replace")
    assert status != 500 and status not in range(504, 600) and status != 501, (label, text)
    if status >= 300:
        body = json.loads(text)
        # `/ready`'s 503 tells an admin why (`failed`, reference §3.1; issue #34)
        why = {"failed"} if label.startswith("GET /ready") and status == 503 else set()
        assert isinstance(body, dict) and set(body) - why == {"error", "request_id"}, (label, text)
    exposed = text + " " + " ".join(f"{k}: {v}" for k, v in response.headers.items())
    leaked = [secret for secret in SECRETS if secret in exposed]
    assert leaked == [], (label, leaked)


def fuzz(live: LiveService, credentials: Callable[[str], dict[str, str]]) -> int:
    """Fuzz every operation; the number of calls made. Fails unless each operation was called
    in each of its modes (a few examples per operation must still reach all of them)."""
    schema = schemathesis.openapi.from_url(f"{live.base_url}/openapi.json")
    calls = 0
    labels: list[str] = []
    called: set[str] = set()
    for result in schema.get_all_operations():
        operation = result.ok()
        # Only an operation with a body or parameters has invalid inputs to generate.
        has_inputs = (operation.method.lower(), operation.path) in OPERATIONS
        modes = [GenerationMode.POSITIVE] + [GenerationMode.NEGATIVE] * has_inputs
        for mode in modes:
            label = f"{operation.method.upper()} {operation.path} {mode.value}"
            labels.append(label)
            _unlock(live)  # the fuzz's own wrong credentials must not lock its setup out
            _enable(live)  # a generated request may have switched it off

            @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, database=None,
                      phases=[Phase.generate], suppress_health_check=list(HealthCheck))
            @given(case=operation.as_strategy(generation_mode=mode))
            def run(case: Any) -> None:
                nonlocal calls
                headers = {**(case.headers or {}), **credentials(case.path)}
                response = case.call(base_url=live.base_url, headers=headers, timeout=10)
                calls += 1
                called.add(label)  # noqa: B023 - run() runs right here
                assert_well_behaved(response, label)  # noqa: B023

            run()
    assert [label for label in labels if label not in called] == []
    return calls


def test_published_schema_covers_every_route_and_body(live: LiveService) -> None:
    schema = live.http.get("/openapi.json").json()
    operations = {(method, path) for path, item in schema["paths"].items() for method in item}
    assert set(OPERATIONS) <= operations
    for key in OPERATIONS:
        method, path = key
        assert schema["paths"][path][method].keys() >= OPERATIONS[key].keys()
    assert ("get", "/api/business-config") in operations and ("post", "/worker") in operations
    assert ("post", "/api/owner/session") in operations  # issue #35's routes are published
    assert ("post", "/api/owner/session/revoke") in operations
    assert schema["paths"]["/api/accounts/{id}"]["put"]["parameters"][0]["in"] == "path"


def test_fuzzing_without_credentials_finds_no_error_outside_the_envelope(
    live: LiveService,
) -> None:
    assert fuzz(live, lambda path: {"Authorization": "Bearer not-a-credential"}) > 100


def test_fuzzing_with_valid_credentials_finds_no_error_outside_the_envelope(
    live: LiveService,
) -> None:
    assert fuzz(live, lambda path: valid_credentials(live, path)) > 100


async def test_setup_mode_publishes_no_schema() -> None:
    async with running_client(Settings(redis_url="", admin_key="")) as client:
        answer = await client.get("/openapi.json")
    assert answer.status_code == 404
    assert set(answer.json()) == {"error", "request_id"}
