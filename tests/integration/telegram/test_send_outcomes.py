"""What `send_text` reports about a send whose outcome is not a plain Bot API answer (issue #11).

- an `ok: true` answer is a delivery, with the id from the raw answer, even when PTB cannot build
  its `Message` from it;
- `maybe_sent` is True exactly when the whole request went out and no readable answer came back,
  False when the request certainly did not go out and for every Bot API error answer.

The real emulator plays Telegram wherever it can. The outcomes it cannot produce (a server that
reads the request and then never answers, resets, or answers 200 with a page that is not the Bot
API's; a listen queue that is full) come from `_HalfServer` below, a loopback socket that plays
exactly that fault and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from collections.abc import AsyncIterator, Iterator

import pytest

from messageweave.chat.telegram import (
    UNKNOWN_MESSAGE_ID,
    FailureClass,
    TelegramClient,
    TelegramSendError,
    split_text,
)
from messageweave.chat.telegram import client as telegram
from tests.helpers import BotChat, closed_port
from tests.peers.telegram import TelegramEmulator

# The answer the package behind the emulator once gave: request parameters echoed as strings.
# PTB cannot build a Message from it ("argument after ** must be a mapping, not str").
ECHOED_AS_STRING = {"link_preview_options": '{"is_disabled": true}'}


# --- an ok answer is a delivery ------------------------------------------------------------


async def test_an_ok_answer_ptb_cannot_read_is_a_delivery_with_telegrams_id(
    tg_client: TelegramClient, telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    """Bug #11.1: `ok: true` with a field PTB cannot parse was raised as `unknown` and
    dead-lettered, though the user had the message (a replay would send it twice)."""
    await telegram_emulator.fail(token=bot.token, result_override=ECHOED_AS_STRING)

    ids = await tg_client.send_text(bot.chat_id, "delivered despite the odd answer")

    sent = await telegram_emulator.sent_messages(bot.token, bot.chat_id)
    assert [m.text for m in sent] == ["delivered despite the odd answer"]
    assert ids == [sent[0].message_id]
    assert ids[0] != UNKNOWN_MESSAGE_ID


async def test_an_ok_answer_without_a_readable_id_still_counts_its_chunk(
    tg_client: TelegramClient, telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    """Bug #11.1: the middle chunk's ok answer has no usable message_id. It is still a delivered
    chunk (`UNKNOWN_MESSAGE_ID`), so the count a retry resumes from stays right and the rest of
    the text goes out once."""
    text = "\n".join(f"row {n:03d} " + "z" * 60 for n in range(150))
    chunks = split_text(text)
    assert len(chunks) == 3
    await telegram_emulator.fail(
        token=bot.token, method="sendMessage", result_override={"message_id": None},
        skip=1, times=1,
    )

    ids = await tg_client.send_text(bot.chat_id, text)

    sent = await telegram_emulator.sent_messages(bot.token, bot.chat_id)
    assert [m.text for m in sent] == chunks
    assert ids == [sent[0].message_id, UNKNOWN_MESSAGE_ID, sent[2].message_id]


async def test_concurrent_sends_on_one_client_each_get_their_own_ids(
    tg_client: TelegramClient, telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    """Bug #11.1 (the way it is fixed): the raw answer travels per call, not on the shared
    request object, so ids of concurrent sends never cross, even when some answers are odd."""
    chats = [bot.chat_id * 10 + n for n in range(12)]
    for chat in chats[::3]:
        await telegram_emulator.fail(token=bot.token, chat_id=chat,
                                     result_override=ECHOED_AS_STRING)

    results = await asyncio.gather(
        *(tg_client.send_text(chat, f"to chat {chat}") for chat in chats)
    )

    for chat, ids in zip(chats, results, strict=True):
        [message] = await telegram_emulator.sent_messages(bot.token, chat)
        assert message.text == f"to chat {chat}"
        assert ids == [message.message_id]


# --- maybe_sent: the request went out, the answer did not come back -----------------------


class _HalfServer:
    """A loopback HTTP server that reads each request completely, then misbehaves by `mode`:
    `silent` never answers, `close` closes the connection, `reset` resets it (RST), `html200`
    answers 200 with a page that is not a Bot API answer."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.requests: list[bytes] = []
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._arrived = asyncio.Event()
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def wait_for_requests(self, count: int, timeout_s: float = 5.0) -> None:
        async with asyncio.timeout(timeout_s):
            while len(self.requests) < count:
                self._arrived.clear()
                await self._arrived.wait()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open.add(writer)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                 if line.lower().startswith(b"content-length:")),
                0,
            )
            self.requests.append(head + await reader.readexactly(length))
            self._arrived.set()
            if self.mode == "silent":
                await reader.read()  # until the client gives up and closes
            elif self.mode == "reset":
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            elif self.mode == "html200":
                page = b"<html>hello from a captive portal</html>"
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(page), page))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._open.discard(writer)
            writer.close()

    async def stop(self) -> None:
        for writer in list(self._open):
            writer.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


@contextlib.asynccontextmanager
async def half_server(mode: str) -> AsyncIterator[_HalfServer]:
    server = _HalfServer(mode)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def send_failure(base_url: str, bot: BotChat, timeout_s: float) -> TelegramSendError:
    async with TelegramClient(bot.token, base_url, timeout_s=timeout_s) as tg:
        with pytest.raises(TelegramSendError) as caught:
            await tg.send_text(bot.chat_id, "did this arrive?")
    return caught.value


@pytest.mark.parametrize("mode", ["silent", "close", "reset", "html200"])
async def test_a_request_that_went_out_without_a_readable_answer_is_maybe_sent(
    bot: BotChat, mode: str
) -> None:
    """Bug #11.2: a send whose request Telegram may have received and acted on (no answer in
    time, the connection closed or reset while waiting, a 200 that is not the Bot API's) must
    say so, or the pipeline cannot tell "unknown" from "not sent"."""
    async with half_server(mode) as server:
        started = time.monotonic()
        err = await send_failure(server.base_url, bot, timeout_s=0.5)
        elapsed = time.monotonic() - started

    assert len(server.requests) == 1 and b"did+this+arrive" in server.requests[0]
    assert err.maybe_sent is True
    assert err.failure_class is FailureClass.TRANSIENT
    assert elapsed < 2.0
    assert bot.token not in f"{err} {err!r} {err.description}"


async def test_a_call_the_emulator_drops_after_reading_it_is_maybe_sent(
    tg_client: TelegramClient, telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    """Bug #11.2: the emulator read the whole sendMessage and dropped the connection."""
    await telegram_emulator.fail(token=bot.token, close=True, times=1)

    with pytest.raises(TelegramSendError) as caught:
        await tg_client.send_text(bot.chat_id, "hello")

    assert caught.value.maybe_sent is True
    assert caught.value.failure_class is FailureClass.TRANSIENT


async def test_a_slow_telegram_that_delivers_after_our_timeout_was_maybe_sent(
    telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    """Bug #11.2: the overall timeout fired after the request went out, and the emulator then
    delivered the message: exactly the case `maybe_sent` has to flag."""
    await telegram_emulator.fail(token=bot.token, delay_ms=800, times=1)

    err = await send_failure(telegram_emulator.base_url, bot, timeout_s=0.3)

    assert err.maybe_sent is True
    assert err.failure_class is FailureClass.TRANSIENT
    late = await telegram_emulator.wait_for_messages(bot.token, bot.chat_id, 1, timeout_s=5)
    assert [m.text for m in late] == ["did this arrive?"]


# --- maybe_sent: the request certainly did not go out -------------------------------------


async def test_a_closed_port_is_not_sent(bot: BotChat) -> None:
    """Bug #11.2: connection refused: nothing reached Telegram, a retry cannot duplicate."""
    err = await send_failure(f"http://127.0.0.1:{closed_port()}", bot, timeout_s=2.0)

    assert err.maybe_sent is False
    assert err.failure_class is FailureClass.TRANSIENT


async def test_a_host_that_does_not_resolve_is_not_sent(bot: BotChat) -> None:
    """Bug #11.2: a DNS failure (`.invalid` never resolves, RFC 6761) is certainly not sent."""
    err = await send_failure("http://api.telegram.invalid", bot, timeout_s=3.0)

    assert err.maybe_sent is False
    assert err.failure_class is FailureClass.TRANSIENT


@pytest.fixture
def full_listen_queue() -> Iterator[int]:
    """A port whose accept queue is full: the kernel drops further SYNs, so connecting times
    out (a peer that never accepts, the way an overloaded or filtered host looks)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = int(listener.getsockname()[1])
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect(("127.0.0.1", port))
        fillers.append(filler)
    time.sleep(0.1)
    try:
        yield port
    finally:
        for s in [*fillers, listener]:
            s.close()


async def test_a_connect_timeout_is_not_sent(full_listen_queue: int, bot: BotChat) -> None:
    """Bug #11.2: connecting never finished (the connect timeout or the overall one, whichever
    fires first): no request was written."""
    started = time.monotonic()
    err = await send_failure(f"http://127.0.0.1:{full_listen_queue}", bot, timeout_s=0.5)

    assert time.monotonic() - started < 2.0
    assert err.maybe_sent is False
    assert err.failure_class is FailureClass.TRANSIENT


async def test_a_send_that_never_got_a_pooled_connection_is_not_sent(bot: BotChat) -> None:
    """Bug #11.2: every pooled connection is held by a call the server never answers; the send
    waiting for one times out (pool or overall timeout) without writing anything."""
    async with half_server("silent") as server:
        async with TelegramClient(bot.token, server.base_url, timeout_s=0.5) as tg:
            holders = [asyncio.create_task(tg.get_me(timeout_s=10.0))
                       for _ in range(telegram._CONNECTION_POOL_SIZE)]
            await server.wait_for_requests(len(holders))
            with pytest.raises(TelegramSendError) as caught:
                await tg.send_text(bot.chat_id, "no connection for me")
            assert len(server.requests) == len(holders)  # the send's request never arrived
            await server.stop()  # the holders' connections close: they fail at once
            await asyncio.gather(*holders, return_exceptions=True)

    assert caught.value.maybe_sent is False
    assert caught.value.failure_class is FailureClass.TRANSIENT


@pytest.mark.parametrize(
    ("error_code", "expected"),
    [
        (400, FailureClass.NOT_FOUND),
        (403, FailureClass.PERMISSION),
        (429, FailureClass.RATE_LIMIT),
        (500, FailureClass.TRANSIENT),
    ],
)
async def test_a_bot_api_error_answer_is_not_sent(
    tg_client: TelegramClient,
    telegram_emulator: TelegramEmulator,
    bot: BotChat,
    error_code: int,
    expected: FailureClass,
) -> None:
    """Bug #11.2: Telegram answered with an error: it did not send, whatever the class."""
    await telegram_emulator.fail(token=bot.token, error_code=error_code)

    with pytest.raises(TelegramSendError) as caught:
        await tg_client.send_text(bot.chat_id, "hello")

    assert caught.value.maybe_sent is False
    assert caught.value.failure_class is expected
    assert await telegram_emulator.sent_messages(bot.token, bot.chat_id) == []


@pytest.mark.parametrize(("error_code", "maybe_sent"), [(502, True), (504, True), (503, False)])
async def test_a_proxy_error_page_is_maybe_sent_only_when_it_may_have_forwarded(
    tg_client: TelegramClient,
    telegram_emulator: TelegramEmulator,
    bot: BotChat,
    error_code: int,
    maybe_sent: bool,
) -> None:
    """Bug #11.2: a non-JSON page is not the Bot API's answer. 502/504 mean a proxy forwarded
    the call and got no valid answer (it may have been sent); other pages are a refusal."""
    await telegram_emulator.fail(token=bot.token, error_code=error_code, raw_body="<html>x</html>")

    with pytest.raises(TelegramSendError) as caught:
        await tg_client.send_text(bot.chat_id, "hello")

    assert caught.value.maybe_sent is maybe_sent
    assert caught.value.failure_class is FailureClass.TRANSIENT
