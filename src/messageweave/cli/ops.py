"""Operator commands: `diagnose`, `test-notify`, `bootstrap`."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Annotated

import httpx
import typer

from messageweave.api.gateway import signature_headers
from messageweave.chat.telegram import TelegramClient, TelegramSendError
from messageweave.cli.checks import print_checks
from messageweave.cli.common import DataDirOption, console, fail, load_settings
from messageweave.cli.diagnose import run_checks
from messageweave.cli.instance import origin_of
from messageweave.config.live import ConfigService, StoredConfigInvalid, StoreUnavailable
from messageweave.runtime import settings_from_data_dir
from messageweave.settings import KEY_FILE, Settings, default_data_dir
from messageweave.store.config_store import ConfigStore
from messageweave.store.redis import connect


def diagnose(data_dir: DataDirOption = None) -> None:
    """Check how it was started, Redis, the configuration, the mail server, Telegram, the queues.

    Example: messageweave diagnose --data-dir .messageweave
    """
    checks = asyncio.run(run_checks(settings_from_data_dir(data_dir), origin_of(data_dir)))
    print_checks(checks)
    failed = [c for c in checks if c.status == "fail"]
    if failed:
        console.print(f"\n[red]{len(failed)} check(s) failed[/]")
        raise typer.Exit(1)
    console.print("\n[green]all checks passed[/]")


async def _send_test(settings: Settings, chat: int | None, text: str) -> str:
    redis = connect(settings.redis_url)
    try:
        _, cfg = await ConfigService(ConfigStore(redis), settings.encryption_key).read_stored()
    finally:
        await redis.aclose()
    if cfg is None:
        raise RuntimeError("nothing configured yet: save a configuration first")
    chat_id = cfg.telegram_chat_id if chat is None else chat
    if cfg.chat_allowlist and chat_id not in cfg.chat_allowlist:
        raise RuntimeError(f"chat {chat_id} is not in the allowlist")
    async with TelegramClient(cfg.bot_token, api_base_url=cfg.telegram_api_base_url) as bot:
        ids = await bot.send_text(chat_id, text)
    return f"sent to chat {chat_id} (message id {', '.join(map(str, ids))})"


def test_notify(
    chat: Annotated[int | None, typer.Option(help="Chat id (default: the configured chat).")]
    = None,
    text: Annotated[str, typer.Option(help="Message text.")]
    = "messageweave: test notification",
    data_dir: DataDirOption = None,
) -> None:
    """Send one Telegram message with the stored configuration.

    Example: messageweave test-notify --chat 123456789 --text "hello from messageweave"
    """
    settings = load_settings(data_dir)
    try:
        result = asyncio.run(_send_test(settings, chat, text))
    except TelegramSendError as exc:
        fail(f"telegram refused: {exc.failure_class}", highlight=False)
    except (RuntimeError, StoreUnavailable, StoredConfigInvalid, OSError) as exc:
        fail(str(exc), highlight=False)
    console.print(f"[green]ok[/] {result}", highlight=False)


def _admin_key(data_dir: Path | None) -> str:
    key = os.environ.get("CONFIG_ENCRYPTION_KEY", "").strip()
    if key:
        return key
    path = (data_dir or default_data_dir()) / KEY_FILE
    try:
        return path.read_text().strip()
    except OSError:
        fail(f"no CONFIG_ENCRYPTION_KEY and no key file at {path}")


def bootstrap(
    file: Annotated[Path, typer.Option("--file", help="The full configuration (JSON).")],
    url: Annotated[str, typer.Option(help="The running instance.")] = "http://127.0.0.1:8080",
    data_dir: Annotated[Path | None, typer.Option(
        help="Where `messageweave run` keeps its key (when CONFIG_ENCRYPTION_KEY is unset).")]
    = None,
) -> None:
    """Store a first configuration on a running instance (POST /api/bootstrap).

    The worker token, reconcile token and webhook secret may be left out of the file: the
    instance generates them, and they are printed here once. With GATEWAY_SECRET in the
    environment the request is signed as the gateway signs (the instance refuses it otherwise).

    Example: messageweave bootstrap --file config.json --url http://127.0.0.1:8080
    """
    try:
        body = json.loads(file.read_text())
    except (OSError, ValueError, RecursionError) as exc:
        fail(f"cannot read {file}: {type(exc).__name__}")
    key = _admin_key(data_dir)
    endpoint = url.rstrip("/") + "/api/bootstrap"
    headers = {"Authorization": f"Bearer {key}"}
    secret = os.environ.get("GATEWAY_SECRET", "")
    if secret.strip():  # the backend serves only signed requests (reference §3.3)
        target = httpx.URL(endpoint).raw_path.decode()
        headers.update(signature_headers(secret, "POST", target))
    try:
        response = httpx.post(endpoint, json=body, timeout=60, headers=headers)
    except httpx.HTTPError as exc:
        fail(f"{url} unreachable ({type(exc).__name__})")
    if response.status_code == 409:
        fail("already configured: change it on the admin page instead")
    if response.status_code != 200:
        reason = response.headers.get("x-config-error") or _code(response)
        fail(f"HTTP {response.status_code}: {reason}", highlight=False)
    result = response.json()
    console.print(f"[green]ok[/] configuration stored (revision "
                  f"{response.headers.get('x-business-config-revision', '?')})")
    for warning in result.get("warnings", []):
        console.print(f"[yellow]warn[/] {warning.get('component')} {warning.get('step')}: "
                      f"{warning.get('detail')}", highlight=False)
    generated = result.get("generated") or {}
    if generated:
        console.print("generated (shown only this once; keep them where the gateway and your "
                      "cron can read them):")
        for name, value in generated.items():
            console.print(f"  {name} = {value}", highlight=False, markup=False)


def _code(response: httpx.Response) -> str:
    try:
        return str(response.json().get("error"))
    except ValueError:
        return response.text[:200]


def register(app: typer.Typer) -> None:
    app.command()(diagnose)
    app.command("test-notify")(test_notify)
    app.command()(bootstrap)
