"""`/webhook/tg` is the first route the router tries (issue #14: Telegram calls it for every
message, and each route tried before it costs a pattern match per request)."""

from __future__ import annotations

from starlette.routing import Route

from messageweave.api import delivery
from messageweave.app import create_app
from tests.helpers import fastapi_of, settings_for


def test_the_webhook_is_the_first_route_tried() -> None:
    """Catches the router order losing the webhook's place (it was behind about twenty routes,
    a sixth of the request's time in the framework)."""
    app = fastapi_of(create_app(settings_for("redis://127.0.0.1:1/0")))
    assert getattr(app.router.routes[0], "original_router", None) is delivery.router
    first = delivery.router.routes[0]
    assert isinstance(first, Route)
    assert (first.path, first.methods) == ("/webhook/tg", {"POST"})


def test_the_webhook_is_served_without_the_request_wrapper() -> None:
    """Catches the webhook going back through FastAPI's request/response wrapper (a `Request`,
    dependency solving and a `Response` object: a fifth of the request's time, issue #14): the
    route's ASGI app must be the plain endpoint itself."""
    first = delivery.router.routes[0]
    assert isinstance(first, Route)
    assert isinstance(first.app, delivery.TelegramWebhook)
