"""The Telegram peer: the npm Bot API emulator `telegram-test-api` as a real local process.

`telegram_emulator` (session fixture) installs the pinned package with `npm ci` when
`telegram_emulator/node_modules` is missing, starts `telegram_emulator/server.js` (the package
plus our compatibility layer) on a free 127.0.0.1 port and stops it after the session.

Point the code under test at `emulator.base_url` (the `telegram_api_base_url`); any token works,
so give each test its own token and chat id and they will not see each other's messages.
The async helpers play the other side: read what the bot sent, play the human writing to the bot
(delivered to the bot's webhook, with the secret header, or queued for getUpdates), and make Bot
API calls fail. They also look inside: the bot's getUpdates queue (`pending_updates`,
`wait_for_long_poll`) and how often it called a method (`api_calls`); and they can play the bot
itself (`get_updates`, `set_webhook`, `delete_webhook`, `bot_api`) when a test checks the
emulator rather than our client.
"""

from __future__ import annotations

import asyncio
import base64
import fcntl
import hashlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from messageweave.store.redis import die_with_parent

EMULATOR_DIR = Path(__file__).parent / "telegram_emulator"
_READY_MARK = "TTA_READY "
_STARTUP_TIMEOUT_S = 20.0
_NPM_TIMEOUT_S = 300.0
# The emulator speaks plain HTTP, but each httpx client would load certifi's bundle (40 ms of
# CPU) for its TLS: one context for all of them, so polling the emulator costs next to nothing.
_TLS = ssl.create_default_context()


class EmulatorError(RuntimeError):
    """The emulator could not be installed, started, or answered a control call with an error."""


@dataclass(frozen=True)
class SentMessage:
    """A message the bot sent through sendMessage, as the emulator stored it."""

    message_id: int
    chat_id: int
    text: str
    parse_mode: str | None
    date: int
    params: dict[str, Any]
    stored_ms: int = 0  # when the emulator stored it, Unix ms (the harness's, not Telegram's)


@dataclass(frozen=True)
class SentFile:
    """A file the bot sent through sendDocument or sendPhoto (issue #25), bytes included."""

    message_id: int
    chat_id: int
    method: str  # "sendDocument" or "sendPhoto"
    filename: str | None
    mime_type: str | None
    data: bytes
    thread_id: int | None = None


@dataclass(frozen=True)
class Delivery:
    """What happened to a simulated user message.

    `queued` when the bot had no webhook (it waits for getUpdates); otherwise the webhook's HTTP
    `status` to the first attempt, or `error` when the webhook could not be reached (a failed
    delivery stays pending and is resent). `skipped`: its type is not in the bot's
    allowed_updates, so Telegram dropped it.
    """

    update_id: int
    message_id: int
    queued: bool
    status: int | None = None
    error: str | None = None
    skipped: bool = False


@dataclass(frozen=True)
class Pressed:
    """What happened to a simulated button press (a `callback_query` update): like `Delivery`,
    with the query's id, which the bot must answer (answerCallbackQuery)."""

    update_id: int
    callback_id: str
    queued: bool
    status: int | None = None
    error: str | None = None
    skipped: bool = False


@dataclass(frozen=True)
class UpdateQueue:
    """A bot's update queue as the emulator holds it (`/control/updates`)."""

    pending: list[int]  # update_ids not yet confirmed (getUpdates) or delivered (webhook)
    confirmed_offset: int  # every update_id below it is confirmed and forgotten; 0: none yet
    allowed_updates: list[str] | None  # the remembered allowed_updates; None: every type
    polling: bool  # a getUpdates long poll is open now


@dataclass(frozen=True)
class ApiCalls:
    """The Bot API calls the emulator has seen (`/control/calls`), refused ones included."""

    count: int
    times_ms: list[int]  # arrival times, Unix ms, oldest first


@dataclass(frozen=True)
class BotApiAnswer:
    """A Bot API answer as it came: the HTTP status and the JSON body."""

    status_code: int
    body: dict[str, Any]

    @property
    def ok(self) -> bool:
        return self.body.get("ok") is True

    @property
    def result(self) -> Any:
        return self.body.get("result")

    @property
    def error_code(self) -> int | None:
        code = self.body.get("error_code")
        return None if code is None else int(code)

    @property
    def description(self) -> str | None:
        return self.body.get("description")

    @property
    def retry_after(self) -> int | None:
        value = (self.body.get("parameters") or {}).get("retry_after")
        return None if value is None else int(value)


class TelegramEmulator:
    """A running emulator process and its control API. Create with `TelegramEmulator.start()`."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, log_path: Path) -> None:
        self._process = process
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}"
        self.log_path = log_path

    def __repr__(self) -> str:
        return f"TelegramEmulator(base_url={self.base_url!r}, pid={self.pid})"

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def running(self) -> bool:
        return self._process.poll() is None

    @classmethod
    def start(
        cls, log_dir: Path, *, startup_timeout_s: float = _STARTUP_TIMEOUT_S, port: int = 0
    ) -> TelegramEmulator:
        """Install if needed, start on a free loopback port (or `port`: the same Bot API back
        after a stop), return once it listens."""
        node = _tool("node")
        install_packages()
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"telegram-emulator-{time.monotonic_ns()}.log"
        env = {**os.environ, "TTA_PORT": str(port), "TTA_HOST": "127.0.0.1"}
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [node, "server.js"],
                cwd=EMULATOR_DIR,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,  # no orphaned emulator when pytest is killed
            )
        deadline = time.monotonic() + startup_timeout_s
        while time.monotonic() < deadline:
            port = _ready_port(log_path)
            if port is not None:
                return cls(process, port, log_path)
            if process.poll() is not None:
                raise EmulatorError(
                    f"telegram emulator exited with {process.returncode}:\n{_tail(log_path)}"
                )
            time.sleep(0.05)
        _terminate(process)
        raise EmulatorError(
            f"telegram emulator not ready after {startup_timeout_s} s:\n{_tail(log_path)}"
        )

    def stop(self) -> None:
        _terminate(self._process)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    # --- control API (async: the webhook receiver may share the test's event loop) ---------

    async def sent_messages(self, token: str, chat_id: int | None = None) -> list[SentMessage]:
        """Messages the bot `token` sent (to `chat_id`, or to any chat), oldest first."""
        body: dict[str, Any] = {"token": token}
        if chat_id is not None:
            body["chat_id"] = chat_id
        rows = await self._control("/control/sentMessages", body)
        return [
            SentMessage(
                message_id=int(r["message_id"]),
                chat_id=int(r["chat_id"]),
                text=str(r["text"]),
                parse_mode=r["parse_mode"],
                date=int(r["date"]),
                params=dict(r["params"]),
                stored_ms=int(r["stored_ms"]),
            )
            for r in rows
        ]

    async def sent_files(self, token: str, chat_id: int | None = None) -> list[SentFile]:
        """Files the bot `token` sent (sendDocument, sendPhoto), oldest first."""
        body: dict[str, Any] = {"token": token}
        if chat_id is not None:
            body["chat_id"] = chat_id
        rows = await self._control("/control/sentFiles", body)
        return [
            SentFile(
                message_id=int(r["message_id"]),
                chat_id=int(r["chat_id"]),
                method=str(r["method"]),
                filename=r["filename"],
                mime_type=r["mime_type"],
                data=base64.b64decode(r["data_b64"] or ""),
                thread_id=r["message_thread_id"],
            )
            for r in rows
        ]

    async def wait_for_messages(
        self, token: str, chat_id: int, count: int = 1, timeout_s: float = 5.0, *,
        unique: bool = False,
    ) -> list[SentMessage]:
        """Poll until the bot sent at least `count` messages to `chat_id` (with `unique`,
        `count` different texts: a duplicate does not count); return them all."""
        deadline = time.monotonic() + timeout_s
        while True:
            messages = await self.sent_messages(token, chat_id)
            got = len({m.text for m in messages}) if unique else len(messages)
            if got >= count or time.monotonic() >= deadline:
                return messages
            await asyncio.sleep(0.05)

    async def send_user_message(
        self,
        token: str,
        chat_id: int,
        text: str,
        *,
        from_id: int | None = None,
        first_name: str = "Test",
        username: str | None = None,
        chat_type: str = "private",
        reply_to_message_id: int | None = None,
    ) -> Delivery:
        """Play the human: `text` from `chat_id` to bot `token`; with `reply_to_message_id`,
        as a Telegram reply to that message of the bot (its keyboard comes with it).

        With a webhook set, the emulator POSTs the Update (with X-Telegram-Bot-Api-Secret-Token
        when setWebhook had a secret) and this returns after the webhook answered.
        Text starting with /command gets a bot_command entity, as Telegram adds one.
        """
        body: dict[str, Any] = {
            "token": token,
            "chat_id": chat_id,
            "text": text,
            "first_name": first_name,
            "chat_type": chat_type,
        }
        if from_id is not None:
            body["from_id"] = from_id
        if username is not None:
            body["username"] = username
        if reply_to_message_id is not None:
            body["reply_to_message_id"] = reply_to_message_id
        result = await self._control("/control/userMessage", body)
        delivery = result["delivery"]
        return Delivery(
            update_id=int(result["update_id"]),
            message_id=int(result["message_id"]),
            queued=delivery is None,
            status=None if delivery is None else delivery.get("status"),
            error=None if delivery is None else delivery.get("error"),
            skipped=delivery is not None and "skipped" in delivery,
        )

    async def press_button(
        self,
        token: str,
        chat_id: int,
        message_id: int | None,
        data: str,
        *,
        from_id: int | None = None,
        username: str | None = None,
    ) -> Pressed:
        """Play the human pressing a button under the bot's message `message_id` in `chat_id`
        (None: a press without a message). `data` is sent as is, as a modified client could,
        so a test can forge one. Returns after the webhook answered, like `send_user_message`.
        """
        body: dict[str, Any] = {"token": token, "chat_id": chat_id, "data": data}
        if message_id is not None:
            body["message_id"] = message_id
        if from_id is not None:
            body["from_id"] = from_id
        if username is not None:
            body["username"] = username
        result = await self._control("/control/callback", body)
        delivery = result["delivery"]
        return Pressed(
            update_id=int(result["update_id"]),
            callback_id=str(result["callback_id"]),
            queued=delivery is None,
            status=None if delivery is None else delivery.get("status"),
            error=None if delivery is None else delivery.get("error"),
            skipped=delivery is not None and "skipped" in delivery,
        )

    async def callback_answers(self, token: str) -> list[dict[str, Any]]:
        """The bot's answerCallbackQuery calls: callback_query_id, text (or None), show_alert."""
        return list(await self._control("/control/callbackAnswers", {"token": token}))

    async def wait_for_answers(self, token: str, count: int = 1,
                               timeout_s: float = 8.0) -> list[dict[str, Any]]:
        """Poll until the bot answered at least `count` presses; return every answer."""
        deadline = time.monotonic() + timeout_s
        while True:
            answers = await self.callback_answers(token)
            if len(answers) >= count or time.monotonic() >= deadline:
                return answers
            await asyncio.sleep(0.05)

    async def fail(
        self,
        *,
        token: str | None = None,
        method: str | None = None,
        chat_id: int | None = None,
        error_code: int | None = None,
        description: str | None = None,
        retry_after: int | None = None,
        delay_ms: int | None = None,
        close: bool = False,
        raw_body: str | None = None,
        result_override: dict[str, Any] | None = None,
        skip: int | None = None,
        times: int | None = None,
    ) -> int:
        """Make matching Bot API calls fail like Telegram; returns the rule id.

        Unset filters match everything. `error_code` answers `{"ok":false,"error_code",
        "description","parameters":{"retry_after"}}` with that HTTP status (Telegram's usual
        descriptions by default: 400 chat not found, 403 bot was blocked by the user, 429 retry
        after N). `raw_body` answers a non-JSON body instead, `delay_ms` answers late (alone: a
        slow but successful call), `close` drops the connection. `result_override` (alone) is a
        fault double for an answer the real Telegram never gives: the call is carried out, but
        the fields it names are replaced in the `ok: true` answer's `result` (None = null).
        `skip` lets that many matching calls through first; `times` limits how often the rule
        fires, otherwise it holds until `clear_failures`.
        """
        rule: dict[str, Any] = {
            key: value
            for key, value in {
                "token": token,
                "method": method,
                "chat_id": chat_id,
                "error_code": error_code,
                "description": description,
                "retry_after": retry_after,
                "delay_ms": delay_ms,
                "raw_body": raw_body,
                "result_override": result_override,
                "skip": skip,
                "times": times,
            }.items()
            if value is not None
        }
        if close:
            rule["close"] = True
        result = await self._control("/control/failures", rule)
        return int(result["id"])

    async def reject_token(self, token: str) -> None:
        """Answer every call with `token` 401 Unauthorized, as Telegram does for a wrong token."""
        await self.fail(token=token, error_code=401)

    async def clear_failures(self, token: str | None = None) -> None:
        await self._control("/control/failures/clear", {} if token is None else {"token": token})

    async def webhook_deliveries(self, token: str | None = None) -> list[dict[str, Any]]:
        """Every webhook attempt, oldest first: update_id, url, attempt (1 for the first, more
        for a resend), secret_sent, and status or error."""
        body = {} if token is None else {"token": token}
        return list(await self._control("/control/webhookDeliveries", body))

    async def pending_updates(self, token: str) -> UpdateQueue:
        """Bot `token`'s updates not yet confirmed or delivered, its confirmed offset, its
        remembered allowed_updates and whether a getUpdates long poll is open."""
        return _update_queue(await self._control("/control/updates", {"token": token}))

    async def wait_for_long_poll(
        self, token: str, polling: bool = True, timeout_s: float = 5.0
    ) -> UpdateQueue:
        """Wait until a getUpdates long poll of `token` is open (`polling=False`: until none
        is), or `timeout_s`; the emulator answers when it happens, no sleeping here. Returns
        the queue then: check `.polling`."""
        body = {"token": token, "until_polling": polling, "timeout_ms": int(timeout_s * 1000)}
        return _update_queue(await self._control("/control/updates", body, timeout_s + 10))

    async def api_calls(self, token: str, method: str | None = None) -> ApiCalls:
        """How many Bot API calls of `method` (any, when None; case-insensitive) the emulator
        has seen with `token`, refused ones included, and when each arrived."""
        body: dict[str, Any] = {"token": token}
        if method is not None:
            body["method"] = method
        result = await self._control("/control/calls", body)
        return ApiCalls(count=int(result["count"]), times_ms=[int(t) for t in result["times_ms"]])

    async def reset(self) -> None:
        """Forget all messages, updates, webhooks (and their resends), allowed_updates,
        commands, failure rules, deliveries and call counts; an open long poll answers []."""
        await self._control("/control/reset", {})

    # --- the bot's side, for tests of the emulator itself ------------------------------------

    async def bot_api(
        self,
        token: str,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        timeout_s: float = 15.0,
    ) -> BotApiAnswer:
        """Call Bot API `method` as bot `token`, form-encoded like python-telegram-bot (lists
        and objects as JSON text, None left out); the answer as it came, errors included."""
        form = {
            key: value if isinstance(value, str) else json.dumps(value)
            for key, value in (params or {}).items()
            if value is not None
        }
        async with httpx.AsyncClient(
            base_url=self.base_url, trust_env=False, timeout=timeout_s, verify=_TLS
        ) as client:
            response = await client.post(f"/bot{token}/{method}", data=form)
        return BotApiAnswer(status_code=response.status_code, body=response.json())

    async def get_updates(
        self,
        token: str,
        *,
        offset: int | None = None,
        limit: int | None = None,
        timeout_s: int | None = None,
        allowed_updates: list[str] | None = None,
    ) -> BotApiAnswer:
        """getUpdates as the bot; `timeout_s` is its `timeout` parameter, the long poll's
        in seconds (the HTTP request waits 10 s longer)."""
        params = {"offset": offset, "limit": limit, "timeout": timeout_s,
                  "allowed_updates": allowed_updates}
        return await self.bot_api(token, "getUpdates", params,
                                  timeout_s=(timeout_s or 0) + 10)

    async def set_webhook(
        self,
        token: str,
        url: str,
        *,
        secret_token: str | None = None,
        allowed_updates: list[str] | None = None,
        drop_pending_updates: bool | None = None,
    ) -> BotApiAnswer:
        """setWebhook as the bot."""
        return await self.bot_api(token, "setWebhook", {
            "url": url, "secret_token": secret_token, "allowed_updates": allowed_updates,
            "drop_pending_updates": drop_pending_updates,
        })

    async def delete_webhook(
        self, token: str, *, drop_pending_updates: bool | None = None
    ) -> BotApiAnswer:
        """deleteWebhook as the bot."""
        return await self.bot_api(token, "deleteWebhook",
                                  {"drop_pending_updates": drop_pending_updates})

    async def _control(self, path: str, body: dict[str, Any], timeout_s: float = 15) -> Any:
        async with httpx.AsyncClient(
            base_url=self.base_url, trust_env=False, timeout=timeout_s, verify=_TLS
        ) as client:
            response = await client.post(path, json=body)
        data = response.json()
        if response.status_code != 200 or not data.get("ok"):
            raise EmulatorError(f"{path} -> {response.status_code} {data}")
        return data["result"]


def _update_queue(result: dict[str, Any]) -> UpdateQueue:
    allowed = result["allowed_updates"]
    return UpdateQueue(
        pending=[int(u) for u in result["pending"]],
        confirmed_offset=int(result["confirmed_offset"]),
        allowed_updates=None if allowed is None else [str(a) for a in allowed],
        polling=bool(result["polling"]),
    )


def install_packages() -> None:
    """`npm ci` into telegram_emulator/node_modules unless a complete install is there.

    A cross-process lock keeps parallel test runs from installing over each other.
    """
    if _installed():
        return
    npm = _tool("npm")
    key = hashlib.sha256(str(EMULATOR_DIR).encode()).hexdigest()[:16]
    lock_path = Path(tempfile.gettempdir()) / f"messageweave-telegram-emulator-{key}.lock"
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _installed():
            return
        try:
            done = subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=EMULATOR_DIR,
                capture_output=True,
                text=True,
                timeout=_NPM_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise EmulatorError(f"npm ci did not finish in {_NPM_TIMEOUT_S} s") from exc
        if done.returncode != 0 or not _installed():
            raise EmulatorError(
                f"npm ci in {EMULATOR_DIR} failed ({done.returncode}):\n"
                f"{(done.stdout + done.stderr)[-3000:]}"
            )


def _installed() -> bool:
    modules = EMULATOR_DIR / "node_modules"
    # npm writes node_modules/.package-lock.json last, so its presence means a finished install.
    return (modules / ".package-lock.json").is_file() and (
        modules / "telegram-test-api" / "package.json"
    ).is_file()


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise EmulatorError(
            f"`{name}` is not on PATH. The Telegram tests run the npm package telegram-test-api "
            "as a real Bot API emulator and need Node.js >= 18 with npm "
            "(Debian: `apt-get install nodejs npm`)."
        )
    return path


def _ready_port(log_path: Path) -> int | None:
    for line in log_path.read_text(errors="replace").splitlines():
        if line.startswith(_READY_MARK):
            return int(json.loads(line[len(_READY_MARK) :])["port"])
    return None


def _tail(log_path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(log_path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _terminate(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)


@pytest.fixture(scope="session")
def telegram_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TelegramEmulator]:
    """The emulator for the whole session. Fails (never skips) when Node.js/npm are missing."""
    try:
        emulator = TelegramEmulator.start(tmp_path_factory.mktemp("telegram-emulator"))
    except EmulatorError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield emulator
    finally:
        emulator.stop()
