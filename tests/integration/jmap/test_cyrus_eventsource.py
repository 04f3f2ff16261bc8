"""The Cyrus harness's EventSource push (RFC 8620 §7.3) and restart, against the real server.

These tests prove the harness (tests/peers/cyrus.py), not MessageWeave. Debian's httpd answers
`204 No Content` on `eventSourceUrl`, so the harness runs a byte-patched copy with
`jmap_pushpoll` set. Here a client that knows only the RFC uses it:

- it expands the session's RFC 6570 level-1 template;
- it streams with httpx over Basic auth;
- it reads events until the one it waits for, under a generous overall deadline, with no sleeps.

What the patched Cyrus 3.6 does, pinned here so that a package upgrade shows up:
- pings arrive every `ping` seconds;
- no state event is sent on connect;
- a delivery is pushed as `{"@type": "StateChange", "changed": {account: {"Email": state}}}`
  within about `jmap_pushpoll` (1 s), and that `state` is the one `Email/get` returns.

The tests on the session-wide `cyrus` take a `fresh` user, whose empty mailbox no other test's
mail touches. The restart tests use an instance of their own, so the shared one is not bounced.
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.parse
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import FreshUser
from tests.peers.cyrus import (
    STOCK_HTTPD,
    CyrusError,
    CyrusServer,
    make_message,
    new_base_dir,
    patch_httpd_for_eventsource,
    remove_base_dir,
)
from tests.peers.cyrus import running as running_cyrus

DEADLINE_S = 30.0  # per wait; the events come within 1-2 s (ping=1, jmap_pushpoll 1 s)
CORE = "urn:ietf:params:jmap:core"
MAIL = "urn:ietf:params:jmap:mail"
OWN_USER, OWN_PASSWORD = "erin", "erin-secret"


# ---------------------------------------------------------------------- a minimal RFC client


def expand(template: str, **values: str) -> str:
    """RFC 6570 level 1: each `{name}` becomes its value, percent-encoded except unreserved."""
    return re.sub(
        r"\{([^}]+)\}", lambda m: urllib.parse.quote(values[m.group(1)], safe="-._~"), template
    )


@dataclass(frozen=True)
class Event:
    type: str  # "message" when the server sent no `event:` field
    data: Any  # the JSON of `data:`
    id: str | None


class EventStream:
    """Server-sent events (the WHATWG event-stream format), read from a streaming response."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._lines = response.aiter_lines()
        self.seen: list[Event] = []

    async def next(self) -> Event | None:
        """The next event, or None when the server closed the stream."""
        fields: dict[str, list[str]] = {}
        async for line in self._lines:
            if line == "":
                if fields:
                    event = Event(
                        type=fields.get("event", ["message"])[-1],
                        data=json.loads("\n".join(fields.get("data", ["null"]))),
                        id=fields.get("id", [None])[-1],
                    )
                    self.seen.append(event)
                    return event
                continue
            if line.startswith(":"):
                continue  # a comment
            name, _, value = line.partition(":")
            fields.setdefault(name, []).append(value.removeprefix(" "))
        return None

    async def until(self, wanted: Callable[[Event], bool]) -> Event:
        """Read events until one is `wanted`, within DEADLINE_S."""
        try:
            async with asyncio.timeout(DEADLINE_S):
                while True:
                    event = await self.next()
                    if event is None:
                        raise AssertionError(f"stream closed; events seen: {self.seen}")
                    if wanted(event):
                        return event
        except TimeoutError:
            raise AssertionError(
                f"no {wanted.__name__} event within {DEADLINE_S} s; events seen: {self.seen}"
            ) from None

    async def until_closed(self) -> None:
        """Read until the server ends the stream, within DEADLINE_S."""
        try:
            async with asyncio.timeout(DEADLINE_S):
                while await self.next() is not None:
                    pass
        except (httpx.RemoteProtocolError, httpx.ReadError):
            pass  # a cut connection ends the stream as well
        except TimeoutError:
            raise AssertionError(
                f"the stream stayed open for {DEADLINE_S} s; events seen: {self.seen}"
            ) from None


def is_ping(event: Event) -> bool:
    return event.type == "ping"


def is_state(event: Event) -> bool:
    return event.type == "state"


@dataclass
class Account:
    """One user's view of a Cyrus: its session (over HTTPS or plain HTTP) and a client."""

    cyrus: CyrusServer
    user: str
    http: httpx.AsyncClient
    tls: bool = True

    @property
    def session_url(self) -> str:
        return self.cyrus.session_url if self.tls else self.cyrus.http_session_url

    async def session(self) -> tuple[dict[str, Any], str]:
        """The session resource and the URL it was served from (after Cyrus's 301)."""
        r = await self.http.get(self.session_url, follow_redirects=True)
        r.raise_for_status()
        return r.json(), str(r.url)

    async def account_id(self) -> str:
        session, _ = await self.session()
        account_id: str = session["primaryAccounts"][MAIL]
        return account_id

    async def call(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        session, base = await self.session()
        body = {
            "using": [CORE, MAIL],
            "methodCalls": [[method, {"accountId": await self.account_id(), **args}, "0"]],
        }
        r = await self.http.post(urllib.parse.urljoin(base, session["apiUrl"]), json=body)
        r.raise_for_status()
        name, result, _ = r.json()["methodResponses"][0]
        assert name == method, result
        return dict(result)

    async def email_state(self) -> str:
        return str((await self.call("Email/get", {"ids": []}))["state"])

    async def email_total(self) -> int:
        return int((await self.call("Email/query", {"calculateTotal": True}))["total"])

    @asynccontextmanager
    async def events(
        self, types: str = "Email", ping: int = 1, closeafter: str = "no"
    ) -> AsyncIterator[EventStream]:
        session, base = await self.session()
        url = urllib.parse.urljoin(
            base,
            expand(session["eventSourceUrl"], types=types, closeafter=closeafter, ping=str(ping)),
        )
        async with self.http.stream(
            "GET", url, headers={"Accept": "text/event-stream"}
        ) as response:
            # Says what Cyrus answered when a stream "closes" at once (seen once in CI, under
            # load: "stream closed; events seen: []").
            assert response.status_code == 200, (response.status_code, await response.aread())
            yield EventStream(response)

    async def deliver(self, subject: str) -> None:
        raw = make_message(subject, to=f"{self.user}@localhost")
        await asyncio.to_thread(self.cyrus.deliver, raw, self.user)


@asynccontextmanager
async def account(
    cyrus: CyrusServer, user: str, password: str, *, tls: bool = True
) -> AsyncIterator[Account]:
    async with httpx.AsyncClient(
        auth=(user, password),
        verify=cyrus.ssl_context() if tls else False,
        timeout=httpx.Timeout(10.0),
    ) as http:
        yield Account(cyrus, user, http, tls)


@pytest.fixture(scope="module")
def own_cyrus() -> Iterator[CyrusServer]:
    """An instance of its own for the restart tests (the session-wide one is not bounced)."""
    with running_cyrus(users={OWN_USER: OWN_PASSWORD}) as server:
        yield server


# ---------------------------------------------------------------------- the tests


@pytest.mark.parametrize("tls", [True, False], ids=["https", "http"])
async def test_event_source_answers_200_with_an_event_stream_and_pings(
    cyrus: CyrusServer, fresh: FreshUser, tls: bool
) -> None:
    """Catches a harness that runs the stock httpd on that listener (204 No Content) or leaves
    out `jmap_pushpoll`. It also catches a patch that gets the server to answer but leaves the
    stream dead, and a session whose `eventSourceUrl` is not the RFC 6570 template."""
    async with account(cyrus, fresh.user, fresh.password, tls=tls) as acct:
        session, base = await acct.session()
        template = session["eventSourceUrl"]
        assert {"{types}", "{closeafter}", "{ping}"} <= set(re.findall(r"\{\w+\}", template))
        assert urllib.parse.urljoin(base, template) == (
            cyrus.eventsource_url if tls else cyrus.http_eventsource_url
        )
        async with acct.events(ping=1) as stream:
            assert stream.response.status_code == 200
            assert stream.response.headers["content-type"].startswith("text/event-stream")
            ping = await stream.until(is_ping)
        assert ping.data == {"interval": 1}
        assert not any(is_state(e) for e in stream.seen)  # Cyrus sends no state on connect


async def test_a_delivered_mail_is_pushed_as_a_state_event_with_the_email_get_state(
    cyrus: CyrusServer, fresh: FreshUser
) -> None:
    """Catches a patched httpd that streams but never pushes a change: `jmap_push_poll` not
    stored, or the patch landing on the wrong store. It also catches `deliver()` not reaching
    the INBOX that JMAP shows for the user, and a push that reports another account or type."""
    async with account(cyrus, fresh.user, fresh.password) as acct:
        account_id = await acct.account_id()
        before = await acct.email_state()
        async with acct.events(types="Email", ping=1) as stream:
            await stream.until(is_ping)  # the stream is live before the mail comes
            await acct.deliver("pushed over EventSource")
            event = await stream.until(is_state)
        assert event.data["@type"] == "StateChange"
        state = await acct.email_state()
        assert state != before
        assert event.data["changed"] == {account_id: {"Email": state}}


async def test_restart_with_a_client_connected_keeps_data_ports_and_push(
    own_cyrus: CyrusServer,
) -> None:
    """Catches a `restart()` that loses the data dir, the users or the ports, or forgets the
    patched httpd or `jmap_pushpoll`. It also catches a `stop()` that leaves an httpd child
    alive serving the old stream (the stream would not end, and the child holds the listening
    socket). And it catches a `start()` that trips over that connection's socket, which the
    server closed first and which lingers in FIN_WAIT/TIME_WAIT on the same port."""
    srv = own_cyrus
    ports, session_url = srv.ports, srv.http_session_url
    async with account(srv, OWN_USER, OWN_PASSWORD, tls=False) as acct:
        account_id = await acct.account_id()
        async with acct.events(ping=1) as old:
            await old.until(is_ping)
            await acct.deliver("before the restart")
            first = await old.until(is_state)
            await asyncio.to_thread(srv.restart)
            await old.until_closed()  # the old server's connection is gone
        assert first.data["changed"][account_id]["Email"] == await acct.email_state()

        assert srv.running and srv.ports == ports and srv.http_session_url == session_url
        assert await acct.email_total() == 1  # the mail from before the restart is kept
        before = await acct.email_state()
        async with acct.events(ping=1) as new:
            await new.until(is_ping)
            await acct.deliver("after the restart")
            event = await new.until(is_state)
        state = await acct.email_state()
        assert state != before
        assert event.data["changed"] == {account_id: {"Email": state}}
        assert await acct.email_total() == 2


async def test_stopped_makes_cyrus_unreachable_and_starts_it_again(
    own_cyrus: CyrusServer,
) -> None:
    """Catches a `stopped()` that leaves a listener up (a test of "server down" would then
    see no outage) or that does not come back with the same ports and mail."""
    srv = own_cyrus
    async with account(srv, OWN_USER, OWN_PASSWORD, tls=False) as acct:
        total = await acct.email_total()
        with srv.stopped():
            assert not srv.running
            for url in (srv.http_session_url, srv.session_url):
                with pytest.raises(httpx.ConnectError):
                    await acct.http.get(url)
            with pytest.raises(OSError):  # LMTP is down too
                srv.deliver(make_message("while Cyrus is down"), OWN_USER)
        assert srv.running
        assert await acct.email_total() == total
        async with acct.events(ping=1) as stream:
            await stream.until(is_ping)


async def test_stock_httpd_answers_204_without_the_patch() -> None:
    """Catches `eventsource=False` still running the patched copy. It also shows why the patch
    exists: if Debian's httpd ever answers 200 here, the patch is no longer needed."""
    base = new_base_dir()
    srv = CyrusServer(base, users={OWN_USER: OWN_PASSWORD}, eventsource=False)
    try:
        srv.start()
        assert srv.httpd_binary == STOCK_HTTPD
        async with account(srv, OWN_USER, OWN_PASSWORD) as acct:
            session, base_url = await acct.session()
            url = urllib.parse.urljoin(
                base_url, expand(session["eventSourceUrl"], types="*", closeafter="no", ping="1")
            )
            r = await acct.http.get(url, headers={"Accept": "text/event-stream"})
        assert r.status_code == 204
    finally:
        srv.stop()
        remove_base_dir(base)


def test_the_patch_changes_only_the_two_known_spots() -> None:
    """Catches a byte pattern that matches more than `jmap_init()`'s two instructions: the
    NOP over the `je` on `ws_enabled` (6 bytes) and the early `pop %rbx; ret` (7 bytes)."""
    stock = STOCK_HTTPD.read_bytes()
    patched = patch_httpd_for_eventsource(stock)
    assert len(patched) == len(stock)
    changed = [i for i, (a, b) in enumerate(zip(stock, patched, strict=True)) if a != b]
    assert 2 <= len(changed) <= 13
    assert changed[-1] - changed[0] < 120  # both inside the same few instructions
    assert patched[changed[0] : changed[0] + 6] == b"\x66\x0f\x1f\x44\x00\x00"  # the NOP
    assert patch_httpd_for_eventsource(stock) == patched  # deterministic


def test_start_fails_clearly_on_an_httpd_it_cannot_patch(tmp_path: Path) -> None:
    """Catches a harness that quietly falls back to the stock httpd on another Cyrus build,
    where EventSource tests would then fail far away on a 204, or be skipped. Start-up must
    fail at once with a `CyrusError` that names the remedy, and leave no process behind."""
    unknown = tmp_path / "httpd"
    unknown.write_bytes(b"\x7fELF" + bytes(4096))
    base = new_base_dir()
    srv = CyrusServer(base, users={OWN_USER: OWN_PASSWORD}, stock_httpd=unknown)
    try:
        with pytest.raises(CyrusError, match="EventSource patch") as caught:
            srv.start()
        assert "eventsource=False" in str(caught.value)
        assert not srv.running
    finally:
        srv.stop()
        remove_base_dir(base)
