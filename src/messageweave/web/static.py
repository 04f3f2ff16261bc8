"""`GET /` and the page's assets (`/assets/<name>`) from the package, with strict headers."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from functools import cache
from importlib import resources

from fastapi import APIRouter
from fastapi.responses import Response

from messageweave.config.model import all_timezones

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
_COMMON = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
_HTML_ONLY = {"Content-Security-Policy": CSP, "X-Frame-Options": "DENY"}
_JS = "text/javascript; charset=utf-8"

# The page's ES modules (index.html loads `main.js`, which imports the rest). Each gets its own
# fixed route, so a request can never name any other file of the package.
SCRIPTS = (
    "main.js", "i18n.js", "strings-common.js", "strings-config.js", "strings-rules.js",
    "strings-ops.js", "api.js", "dom.js", "status.js", "session.js", "processing.js",
    "business.js", "business-form.js", "business-imap.js", "rules.js", "rules-editor.js",
    "dry-run.js", "zones.js", "callbacks.js", "delivery.js", "gap-audit.js", "logs.js",
    "chats.js", "trace.js", "discover.js", "preflight.js", "strings-accounts.js", "accounts.js",
    "account-form.js",
)
# Every file served under /assets/, with its media type.
ASSETS: dict[str, str] = {**dict.fromkeys(SCRIPTS, _JS), "styles.css": "text/css; charset=utf-8"}

# zones.js carries this marker list; it is replaced by every time zone the backend accepts, so
# the page offers exactly what validation allows (no extra route, nothing the CSP blocks).
ZONES_MARKER = b'["__MW_TIMEZONES__"]'
ZONES_MODULE = "zones.js"

router = APIRouter()


@cache
def _asset(name: str) -> bytes:
    data = resources.files("messageweave.web").joinpath(name).read_bytes()
    if name == ZONES_MODULE:
        data = data.replace(ZONES_MARKER, json.dumps(all_timezones()).encode(), 1)
    return data


def _serve(name: str, media_type: str, *, html: bool = False) -> Response:
    headers = {**_COMMON, **(_HTML_ONLY if html else {})}
    return Response(_asset(name), media_type=media_type, headers=headers)


@router.get("/")
async def index() -> Response:
    return _serve("index.html", "text/html; charset=utf-8", html=True)


def _asset_handler(name: str, media_type: str) -> Callable[[], Awaitable[Response]]:
    async def asset() -> Response:
        return _serve(name, media_type)

    return asset


for _name, _media_type in ASSETS.items():
    router.add_api_route(f"/assets/{_name}", _asset_handler(_name, _media_type),
                         methods=["GET"], name=f"asset:{_name}")
