"""`/webhook/tg` is served ahead of the framework (issue #26; Telegram calls it for every
message, and FastAPI's own layers and router cost it a fifth of its time), yet answers like any
route: the envelope for its errors, the request id and security headers, 405 for other methods."""

from __future__ import annotations

import httpx
from fastapi import FastAPI

from messageweave.api import delivery
from messageweave.app import create_app
from messageweave.asgi import DirectRoutes
from tests.helpers import assert_envelope, layer_of, settings_for


def test_the_webhook_goes_straight_to_its_plain_endpoint() -> None:
    """Catches the webhook going back through FastAPI's layers and router (issue #26), or
    through its request/response wrapper (a `Request`, dependency solving and a `Response`
    object, issue #14): the layer just outside the FastAPI app must hand a POST to
    `/webhook/tg`, and nothing else, to the plain endpoint."""
    direct = layer_of(create_app(settings_for("redis://127.0.0.1:1/0")), DirectRoutes)
    assert isinstance(direct.app, FastAPI)
    assert list(direct.direct) == [("POST", "/webhook/tg")]
    assert isinstance(direct.direct[("POST", "/webhook/tg")], delivery.TelegramWebhook)


async def test_the_direct_webhook_answers_like_a_route() -> None:
    """Catches the direct path losing what the framework gave it: a wrong secret must still
    be the 401 envelope with its request id and the security headers, and a GET the 405 that
    names POST (the router keeps the route for it)."""
    asgi = create_app(settings_for("redis://127.0.0.1:1/0"))
    transport = httpx.ASGITransport(app=asgi)
    async with httpx.AsyncClient(transport=transport, base_url="http://mw.test") as client:
        refused = await client.post("/webhook/tg", json={"update_id": 1},
                                    headers={delivery.SECRET_HEADER: "wrong"})
        other = await client.get("/webhook/tg")
    assert_envelope(refused, 401, "unauthorized")
    assert refused.headers["x-request-id"] == refused.json()["request_id"]
    assert refused.headers["x-content-type-options"] == "nosniff"
    assert_envelope(other, 405, "method_not_allowed")
    assert other.headers["allow"] == "POST"
