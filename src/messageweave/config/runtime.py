"""Building the runtime from a configuration, and reporting what failed without leaking secrets.

"Persist and report": a valid configuration is always saved; building its clients (JMAP
session, LLM settings) happens afterwards and failures come back as warnings
`{component, step, detail}` with every credential scrubbed from `detail`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from messageweave.config.model import BusinessConfig, OutboundConfig

_URL_CREDENTIALS = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@")
_BOT_PATH = re.compile(r"/bot[^/\s]+")
WELL_KNOWN = "/.well-known/jmap"


def scrub(text: str, secrets: list[str | None]) -> str:
    """Remove `scheme://user:pass@`, Telegram `/bot<token>` paths and every known secret."""
    text = _URL_CREDENTIALS.sub(r"\1<credentials>@", text)
    text = _BOT_PATH.sub("/bot<token>", text)
    for secret in secrets:
        if secret and secret.strip():
            text = text.replace(secret, "<secret>")
    return text


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
    """The clients built for one configuration revision."""

    config: BusinessConfig
    jmap_account_id: str | None = None
    jmap_api_url: str | None = None
    extras: dict[str, Any] = field(default_factory=dict)


def jmap_session_url(configured: str) -> str:
    """The session resource: `/.well-known/jmap` on the origin, or the configured path."""
    parts = urlsplit(configured.strip())
    path = parts.path if parts.path not in ("", "/") else WELL_KNOWN
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def jmap_origin_probe_url(configured: str) -> str:
    parts = urlsplit(configured.strip())
    return urlunsplit((parts.scheme, parts.netloc, WELL_KNOWN, "", ""))


def _same_origin(a: httpx.URL, b: httpx.URL) -> bool:
    return (a.scheme, a.host, a.port) == (b.scheme, b.host, b.port)


async def fetch_jmap_session(cfg: BusinessConfig, timeout_s: float) -> dict[str, Any]:
    """GET the JMAP session with Basic auth, following redirects on the same origin only."""
    url = httpx.URL(jmap_session_url(cfg.jmap_session_url))
    auth = httpx.BasicAuth(cfg.jmap_username, cfg.jmap_password)
    async with httpx.AsyncClient(timeout=timeout_s, follow_redirects=False) as client:
        for _ in range(5):
            response = await client.get(url, auth=auth, headers={"Accept": "application/json"})
            if response.is_redirect:
                target = url.join(response.headers.get("location", ""))
                if not _same_origin(url, target):
                    raise JmapConnectError("connect", "redirect to another host refused")
                url = target
                continue
            status = response.status_code
            if status in (401, 403):
                raise JmapConnectError("connect", f"authentication failed (HTTP {status})")
            if status != 200:
                raise JmapConnectError("connect", f"session request failed (HTTP {status})")
            try:
                session = response.json()
            except ValueError as exc:
                raise JmapConnectError("connect", "session response is not JSON") from exc
            if not isinstance(session, dict):
                raise JmapConnectError("connect", "session response is not a JSON object")
            return session
    raise JmapConnectError("connect", "too many redirects")


class JmapConnectError(Exception):
    def __init__(self, step: str, detail: str) -> None:
        super().__init__(detail)
        self.step = step
        self.detail = detail


def _select_account(cfg: BusinessConfig, session: dict[str, Any]) -> str:
    accounts = session.get("accounts")
    if not isinstance(accounts, dict):
        raise JmapConnectError("account", "session has no accounts")
    if cfg.account_id and cfg.account_id.strip():
        if cfg.account_id not in accounts:
            raise JmapConnectError("account", "ACCOUNT_ID is not in session accounts")
        return cfg.account_id
    primary = session.get("primaryAccounts", {})
    account = primary.get("urn:ietf:params:jmap:mail") if isinstance(primary, dict) else None
    if not isinstance(account, str):
        raise JmapConnectError("account", "session has no primary mail account")
    return account


async def build_runtime(
    cfg: BusinessConfig, outbound: OutboundConfig
) -> tuple[Runtime, list[Warning]]:
    """Connect what can be connected; every failure becomes a scrubbed warning."""
    runtime = Runtime(config=cfg)
    warnings: list[Warning] = []
    secrets = secrets_of(cfg)
    try:
        session = await fetch_jmap_session(cfg, outbound.jmap_timeout_ms / 1000)
        runtime.jmap_account_id = _select_account(cfg, session)
        api_url = session.get("apiUrl")
        if isinstance(api_url, str):
            runtime.jmap_api_url = str(httpx.URL(jmap_session_url(cfg.jmap_session_url))
                                       .join(api_url))
    except JmapConnectError as exc:
        warnings.append(Warning("jmap", exc.step, scrub(exc.detail, secrets)))
    except httpx.HTTPError as exc:
        detail = f"{type(exc).__name__}: {exc}"
        warnings.append(Warning("jmap", "connect", scrub(detail, secrets)))
    if cfg.llm_active and cfg.llm_base_url:
        llm_warning = _check_llm(cfg)
        if llm_warning is not None:
            warnings.append(llm_warning)
    return runtime, warnings


def _check_llm(cfg: BusinessConfig) -> Warning | None:
    parts = urlsplit(cfg.llm_base_url or "")
    if not parts.hostname:
        return Warning("llm", "build", "LLM base URL has no host")
    return None
