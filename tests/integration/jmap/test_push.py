"""PushSubscription/get and /set (RFC 8620 §7.2): create, verify, extend, destroy.

Cyrus 3.6 does not implement PushSubscription at all (it answers `unknownMethod`; the first test
pins that down against the real server). These paths are therefore tested against a small
RFC-shaped responder, `PushResponder` (in tests/integration/mailbox/push_server.py, which also
serves it over real HTTPS), served here through an httpx MockTransport.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from messageweave.mail.jmap import (
    CORE,
    JmapClient,
    JmapMethodError,
    JmapSetError,
    UnknownMethod,
)
from tests.helpers import DAY, FakeClock, utc_date
from tests.integration.mailbox.push_server import PushResponder


async def test_cyrus_does_not_implement_push_subscriptions(client: JmapClient) -> None:
    with pytest.raises(UnknownMethod) as caught:
        await client.push_subscription_create("dev-1", "https://example.org/push", ["Email"])
    assert caught.value.method == "PushSubscription/set"


@pytest.fixture
async def push() -> Any:
    responder = PushResponder()
    client = JmapClient(
        "https://jmap.example.org/", "alice", "pw", transport=httpx.MockTransport(responder)
    )
    async with client:
        yield client, responder


async def test_push_subscription_create_verify_destroy(push: Any) -> None:
    client, responder = push
    asked = utc_date(time.time() + 7 * DAY)
    sub = await client.push_subscription_create(
        "device-1", "https://bot.example.org/jmap-push", ["Email", "Mailbox"], expires=asked
    )
    assert sub.id == "P1" and sub.expires == asked  # within the server's limit: as asked

    # session-level method: only the core capability, no accountId anywhere
    first = responder.bodies[0]
    assert first["using"] == [CORE]
    [(name, args, _call_id)] = first["methodCalls"]
    assert name == "PushSubscription/set" and "accountId" not in args
    [created] = args["create"].values()
    assert created == {
        "deviceClientId": "device-1",
        "url": "https://bot.example.org/jmap-push",
        "types": ["Email", "Mailbox"],
        "expires": asked,
    }

    await client.push_subscription_verify(sub.id, responder.codes[sub.id])
    assert responder.subscriptions[sub.id]["verificationCode"] == "code-P1"

    await client.push_subscription_destroy(sub.id)
    assert responder.subscriptions == {}


async def test_push_subscription_refusals_are_set_errors(push: Any) -> None:
    client, _responder = push
    with pytest.raises(JmapSetError) as caught:
        await client.push_subscription_create("device-1", "http://insecure.example.org/")
    assert caught.value.type == "invalidProperties"
    assert caught.value.properties == ["url"]

    sub = await client.push_subscription_create("device-1", "https://ok.example.org/")
    with pytest.raises(JmapSetError, match="could not update") as wrong:
        await client.push_subscription_verify(sub.id, "wrong-code")
    assert wrong.value.properties == ["verificationCode"]

    with pytest.raises(JmapSetError) as missing:
        await client.push_subscription_destroy("P404")
    assert missing.value.type == "notFound"


async def test_a_shortened_expiry_is_what_create_and_update_answer() -> None:
    """Bug caught: trusting the `expires` we asked for when the server granted less (RFC 8620
    §7.2 lets it), so renewal would come after the subscription is already gone."""
    clock = FakeClock()
    responder = PushResponder(clock=clock, max_lifetime_s=2 * DAY)
    async with JmapClient("https://jmap.example.org/", "alice", "pw",
                          transport=httpx.MockTransport(responder)) as client:
        sub = await client.push_subscription_create(
            "device-1", "https://ok.example.org/", expires=utc_date(clock.now + 7 * DAY))
        assert sub.expires == utc_date(clock.now + 2 * DAY)
        clock.now += DAY
        granted = await client.push_subscription_set_expires(
            sub.id, utc_date(clock.now + 7 * DAY))
        assert granted == utc_date(clock.now + 2 * DAY)
        # within the limit the server keeps what was asked and says nothing more (updated: null)
        asked = utc_date(clock.now + DAY)
        assert await client.push_subscription_set_expires(sub.id, asked) == asked
        assert responder.subscriptions[sub.id]["expires"] == asked


async def test_get_reports_expiry_and_lost_subscriptions() -> None:
    """Bug caught: a subscription the server lost (restart) or expired looking alive because
    nothing asked the server; PushSubscription/get lists it under `notFound`."""
    clock = FakeClock()
    responder = PushResponder(clock=clock)
    async with JmapClient("https://jmap.example.org/", "alice", "pw",
                          transport=httpx.MockTransport(responder)) as client:
        a = await client.push_subscription_create(
            "device-1", "https://ok.example.org/", expires=utc_date(clock.now + DAY))
        b = await client.push_subscription_create(
            "device-1", "https://ok.example.org/", expires=utc_date(clock.now + 3 * DAY))
        lookup = await client.push_subscription_get([a.id, b.id, "P404"])
        assert lookup.found[a.id].expires == a.expires and lookup.not_found == ["P404"]
        [(_name, args, _id)] = responder.bodies[-1]["methodCalls"]
        assert "accountId" not in args and not {"url", "keys"} & set(args["properties"])

        clock.now += 2 * DAY  # a's expiry passed: the server destroyed it
        lookup = await client.push_subscription_get([a.id, b.id])
        assert list(lookup.found) == [b.id] and lookup.not_found == [a.id]

        responder.restart()
        assert (await client.push_subscription_get([b.id])).not_found == [b.id]
        with pytest.raises(JmapSetError) as gone:
            await client.push_subscription_set_expires(b.id, utc_date(clock.now + DAY))
        assert gone.value.type == "notFound"
        again = await client.push_subscription_create("device-1", "https://ok.example.org/")
        assert again.id not in (a.id, b.id)  # ids are never reused


async def test_the_responder_refuses_what_the_rfc_forbids(push: Any) -> None:
    """Keeps the responder honest: url/keys are never readable, a past expiry is refused."""
    client, _responder = push
    responses = await client.call(
        [("PushSubscription/get", {"ids": None, "properties": ["url"]}, "0")], using=(CORE,))
    error = responses.error("0")
    assert isinstance(error, JmapMethodError) and error.type == "forbidden"
    sub = await client.push_subscription_create("device-1", "https://ok.example.org/")
    with pytest.raises(JmapSetError) as past:
        await client.push_subscription_set_expires(sub.id, utc_date(time.time() - 60))
    assert past.value.properties == ["expires"]
