"""The IMAP response parser (mail/imap/parser.py, responses.py) under hypothesis: what a server
sends is hostile input."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from messageweave.mail.imap import responses
from messageweave.mail.imap.errors import ImapError, ImapProtocolError, ImapTransportError
from messageweave.mail.imap.parser import (
    Atom,
    Data,
    Limits,
    StatusResponse,
    Value,
    parse_response,
    read_response,
)
from messageweave.mail.imap.wire import decode_mailbox, encode_mailbox

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---------------------------------------------------------------------- a generator of IMAP

_ATOM_CHARS = st.sampled_from(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$&'+,-./:;<=>?@^_`|~"
)
atoms = st.text(_ATOM_CHARS, min_size=1, max_size=12).filter(lambda a: a.upper() != "NIL").map(Atom)
flags = st.text(_ATOM_CHARS, min_size=1, max_size=8).map(lambda a: Atom("\\" + a))
quoted = st.binary(max_size=30).map(lambda b: bytes(c for c in b if c not in b"\r\n\0"))
literals = st.binary(max_size=60)


def _wire(value: Value, as_literal: set[int]) -> bytes:
    if value is None:
        return b"NIL"
    if isinstance(value, Atom):
        return value.encode()
    if isinstance(value, bytes):
        if id(value) in as_literal:
            return b"{%d}\r\n" % len(value) + value
        return b'"' + value.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'
    return b"(" + b" ".join(_wire(v, as_literal) for v in value) + b")"


@st.composite
def values(draw: st.DrawFn) -> tuple[list[Value], bytes]:
    """A list of IMAP values and its wire form (strings drawn as quoted or as literals)."""
    leaves = st.one_of(
        st.none(), atoms, flags, quoted.map(lambda b: ("q", b)), literals.map(lambda b: ("l", b))
    )
    tree = draw(
        st.lists(
            st.recursive(leaves, lambda kids: st.lists(kids, max_size=5), max_leaves=30), max_size=6
        )
    )
    as_literal: set[int] = set()
    keep: list[bytes] = []  # ids of the byte strings stay valid while the wire is built

    def unwrap(node: object) -> Value:
        if isinstance(node, tuple):
            kind, data = node
            data = bytes(bytearray(data))  # a distinct object per leaf
            keep.append(data)
            if kind == "l":
                as_literal.add(id(data))
            return data
        if isinstance(node, list):
            return [unwrap(n) for n in node]
        return node  # type: ignore[return-value]

    vals = [unwrap(n) for n in tree]
    return vals, b"".join(b" " + _wire(v, as_literal) for v in vals)


@given(
    kind=st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=1, max_size=8),
    number=st.none() | st.integers(0, 2**32),
    generated=values(),
)
@FUZZ
def test_generated_responses_parse_to_what_was_generated(
    kind: str, number: int | None, generated: tuple[list[Value], bytes]
) -> None:
    """Catches a tokenizer that mis-reads one IMAP form: an escaped quote, a literal holding
    CRLF or parentheses, NIL against "NIL", nested or empty lists, a flag."""
    vals, wire = generated
    if number is None and kind in ("OK", "NO", "BAD", "BYE", "PREAUTH"):
        kind = "X" + kind
    head = b"* " + (b"%d " % number if number is not None else b"") + kind.encode()
    parsed = parse_response(head + wire + b"\r\n")
    assert parsed == Data(kind, number, vals)


@given(generated=values(), chunks=st.lists(st.integers(1, 7), min_size=1, max_size=40))
@FUZZ
async def test_a_response_split_across_reads_is_read_whole(
    generated: tuple[list[Value], bytes], chunks: list[int]
) -> None:
    """Catches a reader that takes the end of a TCP read for the end of a response, or a
    literal's CRLF for the end of its line: the bytes come in arbitrary pieces."""
    vals, wire = generated
    raw = b"* 1 FETCH (X" + wire + b")\r\n* 2 EXISTS\r\n"
    reader = asyncio.StreamReader(limit=1 << 16)

    async def feed() -> None:
        pos = 0
        for size in chunks * (len(raw) // len(chunks) + 1):
            if pos >= len(raw):
                break
            reader.feed_data(raw[pos : pos + size])
            pos += size
            await asyncio.sleep(0)
        reader.feed_eof()

    feeder = asyncio.ensure_future(feed())
    first = await read_response(reader)
    second = await read_response(reader)
    await feeder
    assert parse_response(first) == Data("FETCH", 1, [[Atom("X"), *vals]])
    assert parse_response(second) == Data("EXISTS", 2, [])


@given(st.binary(max_size=300))
@FUZZ
def test_arbitrary_bytes_raise_nothing_but_the_protocol_error(data: bytes) -> None:
    """Catches an IndexError, ValueError, RecursionError or UnicodeDecodeError escaping the
    parser on a hostile server's bytes (the caller handles only ImapError)."""
    for raw in (data + b"\r\n", b"* " + data + b"\r\n", b"* 1 FETCH (" + data + b")\r\n"):
        try:
            parsed = parse_response(raw)
        except ImapProtocolError:
            continue
        if isinstance(parsed, Data):
            try:
                _read_typed(parsed)
            except ImapProtocolError:
                pass


def _read_typed(data: Data) -> None:
    """Every typed reader on a parsed response, as the client would call them."""
    readers: list[Callable[[Data], object]] = [
        responses.fetched, responses.list_entry, responses.status_items,
        responses.search_numbers, responses.esearch_numbers,
    ]  # fmt: skip
    for read in readers:
        try:
            read(data)
        except ImapProtocolError:
            pass


@given(st.binary(max_size=400), st.lists(st.integers(1, 50), min_size=1, max_size=10))
@FUZZ
async def test_the_reader_on_arbitrary_bytes_ends_with_an_imap_error(
    data: bytes, chunks: list[int]
) -> None:
    """Catches a reader that hangs or raises something else when a server sends garbage and
    closes: a literal announced but never sent, a line without an end."""
    reader = asyncio.StreamReader(limit=256)
    pos = 0
    for size in chunks * (len(data) + 1):
        if pos >= len(data):
            break
        reader.feed_data(data[pos : pos + size])
        pos += size
    reader.feed_eof()
    small = Limits(max_line=256, max_literal=100, max_literals=5)
    with pytest.raises((ImapProtocolError, ImapTransportError)):
        while True:
            parse_response(await asyncio.wait_for(read_response(reader, small), 5), small)


# ---------------------------------------------------------------------- caps and time


@pytest.mark.parametrize(
    ("raw", "limits", "message"),
    [
        (b"* 1 FETCH " + b"(" * 100 + b")" * 100 + b"\r\n", Limits(max_depth=64), "deeper"),
        (b"* SEARCH" + b" 1" * 1000 + b"\r\n", Limits(max_items=500), "more than 500"),
        (b"* 1 FETCH (BODY[] {99999999999}\r\nabc)\r\n", Limits(), "not there"),
    ],
)
def test_caps_raise_a_clear_protocol_error(raw: bytes, limits: Limits, message: str) -> None:
    """Catches a parser without caps: nesting that exhausts the stack, a response of a
    million values, a literal larger than what was received."""
    with pytest.raises(ImapProtocolError, match=message):
        parse_response(raw, limits)


async def test_an_announced_literal_over_the_cap_is_refused_before_it_is_read() -> None:
    """Catches a client that reads a 10 GB literal into memory because the server said so."""
    reader = asyncio.StreamReader()
    reader.feed_data(b"* 1 FETCH (BODY[] {10000000000}\r\n")
    with pytest.raises(ImapProtocolError, match="literal of 10000000000 bytes"):
        await read_response(reader, Limits(max_literal=1000))


def test_a_sequence_set_cannot_expand_without_bound() -> None:
    """Catches `ALL 1:4294967295` in an ESEARCH answer becoming a list of four billion UIDs."""
    with pytest.raises(ImapProtocolError, match="more than"):
        responses.esearch_numbers(parse_response(b"* ESEARCH UID ALL 1:4294967295\r\n"))  # type: ignore[arg-type]


_HOSTILE: dict[str, Callable[[int], bytes]] = {
    "open quotes": lambda n: b'* 1 FETCH (X "' + b'\\"' * n + b"\r\n",
    "open parens": lambda n: b"* 1 FETCH " + b"(" * 60 + b"a " * n + b"\r\n",
    "braces": lambda n: b"* 1 FETCH (X " + b"{1" * n + b")\r\n",
    "section": lambda n: b"* 1 FETCH (BODY[" + b"[" * n + b"\r\n",
    "long atom": lambda n: b"* 1 FETCH (X " + b"a" * (2 * n) + b")\r\n",
    "code": lambda n: b"a1 OK [X " + b'"(' * n + b"\r\n",
    "many parts": lambda n: (
        b"* 1 FETCH (BODYSTRUCTURE ("
        + b'("TEXT" "PLAIN" NIL NIL NIL "7BIT" 1 1)' * (n // 4)
        + b' "MIXED"))\r\n'
    ),
    "encoded words": lambda n: (
        b'* 1 FETCH (ENVELOPE (NIL "' + b"=?" * n + b'" NIL NIL NIL NIL NIL NIL NIL NIL))\r\n'
    ),
}


@pytest.mark.parametrize("shape", sorted(_HOSTILE))
def test_hostile_shapes_take_linear_time(shape: str) -> None:
    """Catches a quadratic pass (a regex retried from every position, a list popped from the
    front, a rescan per token): 16 times the input may take about 16 times as long, never 256."""
    make = _HOSTILE[shape]

    def cost(n: int) -> float:
        raw = make(n)
        best = float("inf")
        for _ in range(3):
            # CPU time of this thread: other processes on a busy machine do not inflate it
            start = time.thread_time()
            try:
                parsed = parse_response(raw)
                if isinstance(parsed, Data):
                    _read_typed(parsed)
            except ImapError:
                pass
            best = min(best, time.thread_time() - start)
        return best

    small, large = cost(2_000), cost(32_000)
    assert large < 64 * max(small, 1e-4), (small, large)


# ---------------------------------------------------------------------- a few exact forms


def test_status_responses_keep_code_arguments_and_text() -> None:
    """Catches a response code read as text (UIDVALIDITY lost) or text read as values."""
    assert parse_response(b"* OK [UIDVALIDITY 3857529045] UIDs (valid\r\n") == StatusResponse(
        None, "OK", "UIDVALIDITY", [Atom("3857529045")], "UIDs (valid"
    )
    ok = parse_response(b"a7 OK [APPENDUID 38505 3955] APPEND done\r\n")
    assert ok == StatusResponse(
        "a7", "OK", "APPENDUID", [Atom("38505"), Atom("3955")], "APPEND done"
    )
    odd = parse_response(b'* NO [ALERT "unbalanced] mind the gap\r\n')
    assert isinstance(odd, StatusResponse) and odd.code == "ALERT" and odd.text == "mind the gap"


def test_mailbox_names_round_trip_through_modified_utf7() -> None:
    """Catches a non-ASCII folder name (Entwürfe, 送信済み) or one with `&` sent or read wrong."""
    for name in ("INBOX", "Entwürfe", "送信済み & Co", "&", "a&-b"):
        assert decode_mailbox(encode_mailbox(name).encode()) == name
    assert encode_mailbox("Entwürfe") == "Entw&APw-rfe"


@given(st.text(max_size=40))
@FUZZ
def test_any_attachment_file_name_parameter_reads_as_text(name: str) -> None:
    """Catches an RFC 2231 `filename*` (`utf-8''r%C3%A9sum%C3%A9.pdf`, as Dovecot sends it)
    crashing the BODYSTRUCTURE reader with an AttributeError, or coming back still encoded. A
    value that decodes to nothing (`''`: no charset, no language, no name) is no name (None)."""
    quoted = name.encode().replace(b"\\", b"\\\\").replace(b'"', b'\\"')
    quoted = bytes(c for c in quoted if c not in b"\r\n\0")
    raw = (b'* 1 FETCH (BODYSTRUCTURE ("APPLICATION" "PDF" NIL NIL NIL "BASE64" 10 NIL '
           b'("ATTACHMENT" ("FILENAME*" "' + quoted + b'")) NIL))\r\n')  # fmt: skip
    part = responses.fetched(parse_response(raw)).bodystructure  # type: ignore[arg-type]
    sent = bytes(c for c in name.encode() if c not in b"\r\n\0").decode(errors="replace")
    assert part is not None
    assert isinstance(part.filename, str) or not responses.rfc2231(sent)
    encoded = (
        b'* 1 FETCH (BODYSTRUCTURE ("APPLICATION" "PDF" NIL NIL NIL "BASE64" 10 NIL '
        b'("ATTACHMENT" ("FILENAME*" "utf-8\'\'r%C3%A9sum%C3%A9.pdf")) NIL))\r\n'
    )
    part = responses.fetched(parse_response(encoded)).bodystructure  # type: ignore[arg-type]
    assert part is not None and part.filename == "résumé.pdf"
