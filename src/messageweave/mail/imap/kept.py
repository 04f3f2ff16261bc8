"""The logged-in connection kept between catch-up passes (issue #37).

Each pass opened its own connection: TLS (or STARTTLS), login, then the pass, then LOGOUT;
12–50 ms on Dovecot and Cyrus on one machine, more across a network, paid by the first mail
after every quiet spell. `KeptConnection.lend()` lends one connection kept logged in between
passes instead (the IDLE holder keeps its own: a pass never runs on the idling connection):

- Before a kept connection is lent, one NOOP within `PROBE_S` says it still answers; one that
  does not (the server closed it, a NAT dropped it) is dropped and a new one logged in, so a
  dead connection costs at most `PROBE_S`, never a command's timeout.
- One idle longer than `KEEP_IDLE_S` is logged out and a new one opened: below the 30 minutes
  RFC 9051 §5.4 lets a server wait before it logs an idle client out (Dovecot's and Cyrus's
  own timeouts).
- A pass that raised gives its connection back closed; one lent while another use holds the
  kept one gets its own for that use, kept afterwards only when the slot is empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

from messageweave.mail.imap.client import ImapClient
from messageweave.mail.imap.errors import ImapError

KEEP_IDLE_S = 25 * 60.0
PROBE_S = 2.0


class KeptConnection:
    """One logged-in `ImapClient` kept between uses; `new()` makes an unconnected one."""

    def __init__(self, new: Callable[[], ImapClient]) -> None:
        self._new = new
        self._kept: ImapClient | None = None
        self._since = 0.0  # monotonic time the kept one was given back
        self._closed = False

    @contextlib.asynccontextmanager
    async def lend(self) -> AsyncIterator[ImapClient]:
        """A logged-in connection for one use (the kept one when it still answers)."""
        client = await self._take()
        try:
            yield client
        except BaseException:
            await client.aclose()
            raise
        if self._closed or self._kept is not None:
            await client.aclose()
        else:
            self._kept, self._since = client, time.monotonic()

    async def _take(self) -> ImapClient:
        client, self._kept = self._kept, None
        if client is not None:
            if time.monotonic() - self._since < KEEP_IDLE_S and await _answers(client):
                return client
            await client.aclose()
        client = self._new()
        await client.connect()
        return client

    async def aclose(self) -> None:
        self._closed = True
        client, self._kept = self._kept, None
        if client is not None:
            await client.aclose()


async def _answers(client: ImapClient) -> bool:
    try:
        async with asyncio.timeout(PROBE_S):
            await client.noop()
    except (ImapError, TimeoutError, OSError):
        return False
    return True
