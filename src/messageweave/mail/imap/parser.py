"""IMAP responses off the wire (RFC 9051 / RFC 3501 §7, §9): framing and a tokenizer.

`read_response()` reads one whole response from an `asyncio.StreamReader`: a line, and while
that line ends in a literal announcement (`{n}`, `{n+}`, `~{n}`), the n bytes and the line that
follows them. `parse_response()` turns those bytes into a `Continuation`, a `StatusResponse`
(tagged or untagged OK / NO / BAD / PREAUTH / BYE, with its response code and text) or `Data`
(every other untagged response: `* 3 EXISTS`, `* 7 FETCH (...)`, `* LIST (...) "/" INBOX`, ...).

Data values are `None` (NIL), `Atom` (an atom or a flag, kept as text: `\\Seen`, `12`,
`BODY[1]<0>`), `bytes` (a quoted string or a literal), or a `list` of values (parentheses).
Both functions read their input once, left to right, and stop with `ImapProtocolError` at the
first byte that is not IMAP or at a `Limits` cap: nothing a server sends makes them hang, take
more than linear time or hold more than the caps allow.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import TypeAlias

from messageweave.mail.imap.errors import ImapProtocolError, ImapTransportError


class Atom(str):
    """An IMAP atom (or flag, number, `BODY[section]<origin>` item name) as sent."""

    __slots__ = ()


Value: TypeAlias = "Atom | bytes | list[Value] | None"

STATUS_STATES = frozenset({"OK", "NO", "BAD", "PREAUTH", "BYE"})


@dataclass(frozen=True)
class Limits:
    """Hard caps on one response. A server past one is broken or hostile: `ImapProtocolError`."""

    max_line: int = 4 * 1024 * 1024  # bytes of one line (a literal not counted)
    max_literal: int = 96 * 1024 * 1024  # bytes of one literal (a 50 MB attachment in base64)
    max_literals: int = 10_000  # literals in one response
    max_depth: int = 64  # nested parentheses
    max_items: int = 1_000_000  # values in one response


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class Continuation:
    """`+ text`: the server waits for a literal, an AUTHENTICATE step or IDLE's DONE."""

    text: str


@dataclass(frozen=True)
class StatusResponse:
    """`tag OK [CODE args] text` (tag None for `*`). `code` is upper case, or None."""

    tag: str | None
    state: str
    code: str | None = None
    code_args: list[Value] = field(default_factory=list)
    text: str = ""


@dataclass(frozen=True)
class Data:
    """Any other untagged response: `kind` upper case (`EXISTS`, `FETCH`, `LIST`, ...);
    `number` the message number or count before it (`* 3 EXISTS`), else None."""

    kind: str
    number: int | None
    values: list[Value]


Response = Continuation | StatusResponse | Data

_LITERAL = re.compile(rb"~?\{(\d{1,20})\+?\}\r?\n")
_LITERAL_END = re.compile(rb"~?\{(\d{1,20})\+?\}\r?\n\Z")
# atom-char: any CHAR except ( ) { SP CTL " \ ] (list-wildcards and 8-bit bytes let through)
_ATOM = re.compile(rb'\\?[^\x00-\x20\x7f(){"\\\]]+|\\\*')
_TAG = re.compile(rb'[^\x00-\x20\x7f(){"\\%*+\]]+')
_NUMBER = re.compile(rb"\d{1,20}")
_QUOTED = re.compile(rb'"((?:[^"\\\r\n]|\\["\\])*)"')
_ESCAPE = re.compile(rb'\\(["\\])')
_SECTION = re.compile(rb"[^\]\r\n]*\](?:<\d{1,20}>)?")


async def read_response(reader: asyncio.StreamReader, limits: Limits = DEFAULT_LIMITS) -> bytes:
    """The bytes of one response, literals included, up to and with its final line end.

    Raises `ImapTransportError` when the connection ends first and `ImapProtocolError` when a
    line or literal is over its cap. The reader's own limit must be at least `max_line`."""
    parts: list[bytes] = []
    for _ in range(limits.max_literals + 1):
        line = await _read_line(reader, limits)
        parts.append(line)
        announced = _LITERAL_END.search(line, max(0, len(line) - 32))
        if announced is None:
            return b"".join(parts)
        size = int(announced.group(1))
        if size > limits.max_literal:
            raise ImapProtocolError(
                f"the server announced a literal of {size} bytes (at most {limits.max_literal})"
            )
        try:
            parts.append(await reader.readexactly(size))
        except asyncio.IncompleteReadError:
            raise ImapTransportError("the connection closed inside a literal") from None
    raise ImapProtocolError(f"more than {limits.max_literals} literals in one response")


async def _read_line(reader: asyncio.StreamReader, limits: Limits) -> bytes:
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.LimitOverrunError:
        raise ImapProtocolError("a response line is longer than the reader's limit") from None
    except asyncio.IncompleteReadError as exc:
        raise ImapTransportError(
            "the connection closed" + (" inside a response" if exc.partial else "")
        ) from None
    if len(line) > limits.max_line:
        raise ImapProtocolError(f"a response line is longer than {limits.max_line} bytes")
    return line


def parse_response(raw: bytes, limits: Limits = DEFAULT_LIMITS) -> Response:
    """One response as `read_response` returns it (ending in CRLF or LF)."""
    if raw.endswith(b"\r\n"):
        raw = raw[:-2]
    elif raw.endswith(b"\n"):
        raw = raw[:-1]
    else:
        raise ImapProtocolError("a response does not end with a line end")
    return _Parser(raw, limits).response()


class _Parser:
    """A cursor over one response's bytes; every method moves it forward only."""

    def __init__(self, data: bytes, limits: Limits) -> None:
        self.data = data
        self.pos = 0
        self.limits = limits
        self.items = 0

    def fail(self, what: str) -> ImapProtocolError:
        near = self.data[self.pos : self.pos + 20]
        return ImapProtocolError(f"not IMAP: {what} at byte {self.pos} (near {near!r})")

    def response(self) -> Response:
        if self.data.startswith(b"+"):
            self.pos = 2 if self.data.startswith(b"+ ") else 1
            return Continuation(self.rest_text())
        if self.data.startswith(b"* "):
            self.pos = 2
            return self.untagged()
        tag = self.match(_TAG, "a tag")
        self.expect(b" ")
        state = self.match(_ATOM, "a status").upper()
        if state not in ("OK", "NO", "BAD"):
            raise self.fail(f"a tagged {state!r}")
        return self.status(tag, state)

    def untagged(self) -> Response:
        number: int | None = None
        if (found := _NUMBER.match(self.data, self.pos)) and self.peek_at(found.end()) in b" ":
            number = int(found.group())
            self.pos = found.end()
            self.expect(b" ")
        kind = self.match(_ATOM, "a response name").upper()
        if number is None and kind in STATUS_STATES:
            return self.status(None, kind)
        values: list[Value] = []
        while self.pos < len(self.data):
            self.expect(b" ")
            values.append(self.value())
        return Data(kind, number, values)

    def status(self, tag: str | None, state: str) -> StatusResponse:
        code: str | None = None
        args: list[Value] = []
        if self.data.startswith(b" [", self.pos):
            self.pos += 2
            code, args = self.code()
        if self.data.startswith(b" ", self.pos):
            self.pos += 1
        elif self.pos < len(self.data):
            raise self.fail("text expected")
        return StatusResponse(tag, state, code, args, self.rest_text())

    def code(self) -> tuple[str, list[Value]]:
        """`CODE args]`. Arguments that are not IMAP values (some servers put free text there)
        are kept as one `Atom` of the raw text up to `]`."""
        code = self.match(_ATOM, "a response code").upper()
        start = self.pos
        args: list[Value] = []
        try:
            while not self.data.startswith(b"]", self.pos):
                self.expect(b" ")
                if not self.data.startswith(b"]", self.pos):  # `[CODE ]`: seen in the wild
                    args.append(self.value())
        except ImapProtocolError:
            end = self.data.find(b"]", start)
            if end < 0:
                raise
            args = [Atom(self.data[start:end].strip().decode("utf-8", "replace"))]
            self.pos = end
        self.pos += 1
        return code, args

    # ------------------------------------------------------------------ tokens
    def value(self) -> Value:
        """One value; parenthesized lists with an explicit stack, so depth costs no recursion."""
        stack: list[list[Value]] = []
        while True:
            self.count()
            c = self.peek()
            if c == b"(":
                if len(stack) >= self.limits.max_depth:
                    raise self.fail(f"nesting deeper than {self.limits.max_depth}")
                self.pos += 1
                stack.append([])
                if self.peek() != b")":
                    continue
                item: Value = stack.pop()
                self.pos += 1
            else:
                item = self.scalar()
            while True:
                if not stack:
                    return item
                stack[-1].append(item)
                c = self.peek()
                if c == b")":
                    self.pos += 1
                    item = stack.pop()
                    continue
                if c != b"(" or not isinstance(item, list):  # `(part)(part)`: multipart body
                    self.expect(b" ")
                break

    def scalar(self) -> Value:
        c = self.peek()
        if c == b'"':
            found = _QUOTED.match(self.data, self.pos)
            if found is None:
                raise self.fail("an unterminated quoted string")
            self.pos = found.end()
            return _ESCAPE.sub(rb"\1", found.group(1))
        if c == b"{" or self.data.startswith(b"~{", self.pos):
            return self.literal()
        atom = self.match(_ATOM, "a value")
        if atom.upper() == "NIL":
            return None
        if "[" in atom:  # BODY[1]<0>, BODY[HEADER.FIELDS (A B)]: `]` ends no atom
            found = _SECTION.match(self.data, self.pos)
            if found is not None:
                atom += found.group().decode("utf-8", "replace")
                self.pos = found.end()
        return Atom(atom)

    def literal(self) -> bytes:
        found = _LITERAL.match(self.data, self.pos)
        if found is None:
            raise self.fail("a literal announcement")
        size = int(found.group(1))
        start = found.end()
        if size > self.limits.max_literal or start + size > len(self.data):
            raise self.fail(f"a literal of {size} bytes that is not there")
        self.pos = start + size
        return self.data[start : self.pos]

    # ------------------------------------------------------------------ cursor
    def count(self) -> None:
        self.items += 1
        if self.items > self.limits.max_items:
            raise self.fail(f"more than {self.limits.max_items} values")

    def peek(self) -> bytes:
        return self.data[self.pos : self.pos + 1]

    def peek_at(self, pos: int) -> bytes:
        return self.data[pos : pos + 1]

    def expect(self, token: bytes) -> None:
        if not self.data.startswith(token, self.pos):
            raise self.fail(f"{token!r} expected")
        self.pos += len(token)

    def match(self, pattern: re.Pattern[bytes], what: str) -> str:
        found = pattern.match(self.data, self.pos)
        if found is None:
            raise self.fail(f"{what} expected")
        self.pos = found.end()
        return found.group().decode("utf-8", "replace")

    def rest_text(self) -> str:
        text = self.data[self.pos :].decode("utf-8", "replace")
        self.pos = len(self.data)
        return text
