"""Building the runtime from a configuration, and reporting what failed without leaking secrets.

"Persist and report": a valid configuration is always saved; building its clients (JMAP
session, LLM settings) happens afterwards and failures come back as warnings
`{component, step, detail}` with every credential scrubbed from `detail`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit, urlunsplit

from messageweave.chat.telegram import TelegramClient
from messageweave.config.model import BusinessConfig, OutboundConfig
from messageweave.mail.jmap import JmapAccountError, JmapClient, JmapError

_URL_CREDENTIALS = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@")
_BOT_PATH = re.compile(r"/bot[^/\s]+")
WELL_KNOWN = "/.well-known/jmap"
# A secret is replaced only as a whole value: never inside a longer name made of these.
_NAME_CHAR = r"[A-Za-z0-9_\-]"
MIN_SECRET_LEN = 4  # shorter values would turn ordinary words and addresses into "<secret>"


def scrub(text: str, secrets: list[str | None]) -> str:
    """Remove `scheme://user:pass@`, Telegram `/bot<token>` paths and every known secret."""
    text = _URL_CREDENTIALS.sub(r"\1<credentials>@", text)
    text = _BOT_PATH.sub("/bot<token>", text)
    for secret in secrets:
        if secret and len(secret.strip()) >= MIN_SECRET_LEN:
            text = _whole_value(secret).sub("<secret>", text)
    return text


@lru_cache(maxsize=256)
def _whole_value(secret: str) -> re.Pattern[str]:
    """`secret` where it stands on its own: not preceded or followed by a name character (so a
    secret `mail` never rewrites `mailhost`, nor `7` the `127` of `127.0.0.1`)."""
    return re.compile(rf"(?<!{_NAME_CHAR}){re.escape(secret)}(?!{_NAME_CHAR})")


def secrets_of(cfg: BusinessConfig) -> list[str | None]:
    return [cfg.bot_token, cfg.jmap_password, cfg.telegram_webhook_secret, cfg.reconcile_token,
            cfg.worker_token, cfg.llm_api_key]


@dataclass(frozen=True)
class Warning:
    component: str
    step: str
    detail: str

    def to_json(self) -> dict[str, str]:
        return {"component": self.component, "step": self.step, "detail": self.detail}


@dataclass
class Runtime:
    """The clients built for one configuration revision.

    `jmap` is None when the session could not be fetched (the warning says why);
    `telegram` always exists (building it does no network I/O).
    """

    config: BusinessConfig
    telegram: TelegramClient
    jmap: JmapClient | None = None

    async def aclose(self) -> None:
        if self.jmap is not None:
            await self.jmap.aclose()
        await self.telegram.aclose()


def jmap_origin_probe_url(configured: str) -> str:
    parts = urlsplit(configured.strip())
    return urlunsplit((parts.scheme, parts.netloc, WELL_KNOWN, "", ""))


def new_jmap_client(cfg: BusinessConfig, outbound: OutboundConfig) -> JmapClient:
    return JmapClient(
        cfg.jmap_session_url, cfg.jmap_username, cfg.jmap_password,
        account_id=cfg.account_id or None, timeout=outbound.jmap_timeout_ms / 1000,
    )


async def build_runtime(
    cfg: BusinessConfig, outbound: OutboundConfig
) -> tuple[Runtime, list[Warning]]:
    """Connect what can be connected; every failure becomes a scrubbed warning.

    The returned runtime owns an open JMAP client when its session could be fetched; whoever
    drops the runtime closes it (`Runtime.aclose`).
    """
    runtime = Runtime(
        config=cfg,
        telegram=TelegramClient(cfg.bot_token, api_base_url=cfg.telegram_api_base_url,
                                timeout_s=outbound.telegram_timeout_ms / 1000),
    )
    warnings: list[Warning] = []
    secrets = secrets_of(cfg)
    client = new_jmap_client(cfg, outbound)
    try:
        await client.get_session()
        runtime.jmap = client
    except JmapAccountError as exc:
        warnings.append(Warning("jmap", "account", scrub(str(exc), secrets)))
    except (JmapError, ValueError) as exc:
        warnings.append(Warning("jmap", "connect", scrub(f"{type(exc).__name__}: {exc}", secrets)))
    if runtime.jmap is None:
        await client.aclose()
    if cfg.llm_active:
        llm_warning = _check_llm(cfg)
        if llm_warning is not None:
            warnings.append(llm_warning)
    return runtime, warnings


def _check_llm(cfg: BusinessConfig) -> Warning | None:
    parts = urlsplit(cfg.llm_base_url or "")
    if not parts.hostname:
        return Warning("llm", "build", "LLM base URL has no host")
    return None
