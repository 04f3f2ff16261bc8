"""Browser fixtures: Debian's chromium driven by Playwright against the real service, served by
uvicorn on a loopback port (real HTTP, real Redis, the real CSP headers).

Chromium comes from apt (`apt-get install -y chromium`), never from `playwright install`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from playwright.sync_api import Browser, Page, Playwright, sync_playwright

from messageweave.settings import Settings
from tests.helpers import (
    LiveService,
    PageRun,
    open_browser_page,
    sample_wire,
    save_configuration,
    settings_for,
)

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]
# Set MW_SCREENSHOT_DIR=docs/screenshots to refresh the committed screenshots.
SCREENSHOT_DIR_ENV = "MW_SCREENSHOT_DIR"


# Package scope (tests/browser), not session: while the sync API is active its event loop counts
# as running in this thread, which would stop pytest-asyncio from running the async tests of
# other packages; pytest tears a package's fixtures down after its last test, before any test of
# tests/integration or tests/unit runs. One driver and one browser for every module (each
# started one costs about a second); each test still gets its own context (`open_browser_page`).
@pytest.fixture(scope="package")
def playwright() -> Iterator[Playwright]:
    if not os.path.exists(CHROMIUM):
        pytest.fail(
            f"{CHROMIUM} is missing: the browser tests need Debian's chromium "
            "(`apt-get install -y chromium`, added by scripts/install-test-packages.sh)",
            pytrace=False,
        )
    with sync_playwright() as pw:
        yield pw


@pytest.fixture(scope="package")
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


@pytest.fixture
def configured(service: LiveService) -> LiveService:
    save_configuration(service, sample_wire())
    return service


@pytest.fixture
def page_run(browser: Browser) -> Iterator[PageRun]:
    """An English browser page; on teardown, asserts no CSP violation happened."""
    yield from open_browser_page(browser, "en-US")


@pytest.fixture
def zh_page_run(browser: Browser) -> Iterator[PageRun]:
    yield from open_browser_page(browser, "zh-CN")


@pytest.fixture
def phone_page_run(browser: Browser) -> Iterator[PageRun]:
    yield from open_browser_page(browser, "en-US", viewport={"width": 390, "height": 844},
                     device_scale_factor=1, is_mobile=True, has_touch=True)


@pytest.fixture
def shot(tmp_path: Path) -> Any:
    """Saves a PNG of the page: the full page into docs/screenshots when MW_SCREENSHOT_DIR says
    so; otherwise only what the window shows, into the test's tmp_path, which nobody looks at
    (a full page of the admin card is ~1280x7700 pixels: 0.6 s of PNG encoding a shot)."""
    refresh = os.environ.get(SCREENSHOT_DIR_ENV)
    target = Path(refresh or tmp_path)
    target.mkdir(parents=True, exist_ok=True)

    def save(page: Page, name: str) -> Path:
        path = target / f"{name}.png"
        page.screenshot(path=str(path), full_page=bool(refresh))
        assert path.stat().st_size > 0
        return path

    return save
