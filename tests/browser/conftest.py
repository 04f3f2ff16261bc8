"""Browser fixtures: Debian's chromium driven by Playwright against the real service, served by
uvicorn on a loopback port (real HTTP, real Redis, the real CSP headers).

Chromium comes from apt (`apt-get install -y chromium`), never from `playwright install`.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import uvicorn
from playwright.sync_api import Browser, ConsoleMessage, Page, Playwright, sync_playwright

from messageweave.app import create_app
from messageweave.settings import Settings
from tests.helpers import ADMIN_KEY, admin_headers, free_port, sample_wire, settings_for

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]
# Set MW_SCREENSHOT_DIR=docs/screenshots to refresh the committed screenshots.
SCREENSHOT_DIR_ENV = "MW_SCREENSHOT_DIR"

# Collects `securitypolicyviolation` events before any page script runs (init scripts are
# injected by the browser itself, so the page's CSP does not apply to this one).
_CSP_PROBE = """
window.__cspViolations = [];
document.addEventListener('securitypolicyviolation', function (e) {
  window.__cspViolations.push(e.violatedDirective + ' ' + e.blockedURI);
});
"""


class LiveService:
    """The real ASGI app under uvicorn in a background thread (its own event loop)."""

    def __init__(self, settings: Settings) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=self.port,
                                log_config=None, log_level="warning", lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="uvicorn", daemon=True)

    def start(self) -> LiveService:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the service did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)


# Module scope, not session: while the sync API is active its event loop counts as running in
# this thread, which would stop pytest-asyncio from running the async tests of other packages.
@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    if not os.path.exists(CHROMIUM):
        pytest.fail(
            f"{CHROMIUM} is missing: the browser tests need Debian's chromium "
            "(`apt-get install -y chromium`, added by scripts/install-test-packages.sh)",
            pytrace=False,
        )
    with sync_playwright() as pw:
        yield pw


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    instance = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                          args=CHROMIUM_ARGS)
    yield instance
    instance.close()


@pytest.fixture
def redis_sync(embedded_redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(embedded_redis_url, decode_responses=True)
    client.flushdb()
    yield client
    client.close()


@pytest.fixture
def service(redis_sync: redis.Redis, embedded_redis_url: str) -> Iterator[LiveService]:
    """A configured-mode service on a flushed Redis, with nothing saved yet."""
    live = LiveService(settings_for(embedded_redis_url)).start()
    yield live
    live.stop()


@pytest.fixture
def setup_service() -> Iterator[LiveService]:
    """A service in setup mode: neither REDIS_URL nor CONFIG_ENCRYPTION_KEY."""
    live = LiveService(Settings(redis_url="", admin_key="")).start()
    yield live
    live.stop()


def save_configuration(service: LiveService, wire: dict[str, Any]) -> None:
    """Store a configuration the way another admin would (its own session, over HTTP)."""
    with httpx.Client(base_url=service.base_url) as http:
        token = http.post("/api/admin/session", headers=admin_headers()).json()["session"]
        response = http.put("/api/business-config", json=wire,
                            headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 200, response.text


@pytest.fixture
def configured(service: LiveService) -> LiveService:
    save_configuration(service, sample_wire())
    return service


@dataclass
class PageRun:
    page: Page
    console: list[str] = field(default_factory=list)


def _open(browser: Browser, locale: str, **options: Any) -> Iterator[PageRun]:
    context = browser.new_context(locale=locale, **options)
    context.add_init_script(_CSP_PROBE)
    page = context.new_page()
    run = PageRun(page)

    def on_console(message: ConsoleMessage) -> None:
        run.console.append(f"{message.type}: {message.text}")

    page.on("console", on_console)
    yield run
    violations = page.evaluate("window.__cspViolations || []") if not page.is_closed() else []
    context.close()
    csp_console = [line for line in run.console
                   if "Content Security Policy" in line or "Refused to" in line]
    assert violations == [] and csp_console == [], (violations, csp_console)


@pytest.fixture
def page_run(browser: Browser) -> Iterator[PageRun]:
    """An English browser page; on teardown, asserts no CSP violation happened."""
    yield from _open(browser, "en-US")


@pytest.fixture
def zh_page_run(browser: Browser) -> Iterator[PageRun]:
    yield from _open(browser, "zh-CN")


@pytest.fixture
def phone_page_run(browser: Browser) -> Iterator[PageRun]:
    yield from _open(browser, "en-US", viewport={"width": 390, "height": 844},
                     device_scale_factor=1, is_mobile=True, has_touch=True)


@pytest.fixture
def shot(tmp_path: Path) -> Any:
    """Saves a full-page PNG (into docs/screenshots when MW_SCREENSHOT_DIR says so)."""
    target = Path(os.environ.get(SCREENSHOT_DIR_ENV) or tmp_path)
    target.mkdir(parents=True, exist_ok=True)

    def save(page: Page, name: str) -> Path:
        path = target / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 0
        return path

    return save


__all__ = ["ADMIN_KEY", "LiveService", "PageRun", "save_configuration"]
