"""`GET /`, `/assets/config.js`, `/assets/styles.css` from the package, with strict headers."""

from __future__ import annotations

import json
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

router = APIRouter()


# config.js carries this marker list; it is replaced by every time zone the backend accepts, so
# the page offers exactly what validation allows (no extra route, nothing the CSP blocks).
ZONES_MARKER = b'["__MW_TIMEZONES__"]'


@cache
def _asset(name: str) -> bytes:
    data = resources.files("messageweave.web").joinpath(name).read_bytes()
    if name == "config.js":
        data = data.replace(ZONES_MARKER, json.dumps(all_timezones()).encode(), 1)
    return data


def _serve(name: str, media_type: str, *, html: bool = False) -> Response:
    headers = {**_COMMON, **(_HTML_ONLY if html else {})}
    return Response(_asset(name), media_type=media_type, headers=headers)


@router.get("/")
async def index() -> Response:
    return _serve("index.html", "text/html; charset=utf-8", html=True)


@router.get("/assets/config.js")
async def config_js() -> Response:
    return _serve("config.js", "text/javascript; charset=utf-8")


@router.get("/assets/styles.css")
async def styles_css() -> Response:
    return _serve("styles.css", "text/css; charset=utf-8")
