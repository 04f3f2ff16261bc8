"""JMAP EventSource (RFC 8620 §7.3): the session's `eventSourceUrl` template, and the
`text/event-stream` it answers, read as the HTML Living Standard's server-sent events.

`expand` fills the template's level-1 variables (RFC 6570 §3.2.2: each value percent-encoded
outside the unreserved set). `LineSplitter` cuts the raw bytes into lines (CRLF, LF or CR);
`SseParser` turns the lines into `Event`s: `event:`, `data:` (several lines joined with a
newline), `id:`; a blank line dispatches; a line starting with `:` is a comment; the default
event type is `message`. `state_change` reads a `state` event's data as an RFC 8620
StateChange.

The stream is the server's text, read for as long as the connection lives: a line longer than
`MAX_LINE_BYTES`, or an event whose data exceeds `MAX_EVENT_CHARS`, raises `StreamTooLarge`
(issue #32: a line that never ends took 1.5 GB in 7 s), and every pass here is linear.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from urllib.parse import quote

TEMPLATE_VARIABLES = ("types", "closeafter", "ping")
MAX_LINE_BYTES = 64 * 1024
MAX_EVENT_CHARS = 64 * 1024  # the data lines of one event, joined


class StreamTooLarge(ValueError):
    """A line or an event over its cap; the message names the cap, never the content."""


def expand(template: str, **values: str) -> str:
    """The template with `{types}`, `{closeafter}` and `{ping}` replaced (level 1)."""
    url = template
    for name in TEMPLATE_VARIABLES:
        url = url.replace("{" + name + "}", quote(values.get(name, ""), safe=""))
    return url


@dataclass(frozen=True)
class Event:
    type: str
    data: str
    id: str | None = None


# Yielded first by `JmapClient.events`, once the server answered with an event stream (the
# DOM's `open` event; the stream itself carries no state on connect).
OPEN = Event("open", "")


class LineSplitter:
    """Feed it the stream's raw chunks; it returns the complete lines (decoded, without their
    ending) and keeps at most `max_line` bytes of the unfinished one."""

    def __init__(self, max_line: int = MAX_LINE_BYTES) -> None:
        self._max = max_line
        self._pending = bytearray()
        self._after_cr = False  # a CR ended the last chunk: a LF starting the next is its pair

    def feed(self, chunk: bytes) -> list[str]:
        if not chunk:
            return []
        if self._after_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._after_cr = chunk.endswith(b"\r")
        parts = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        self._pending += parts[0]
        if len(parts) > 1:
            parts[0] = bytes(self._pending)
            self._pending = bytearray(parts.pop())
        else:
            parts = []
        if len(self._pending) > self._max or any(len(p) > self._max for p in parts):
            raise StreamTooLarge(f"a line longer than {self._max} bytes")
        return [p.decode("utf-8", "replace") for p in parts]


@dataclass
class SseParser:
    """Feed it the stream's lines (without their line ending); it returns each dispatched event,
    and raises `StreamTooLarge` when one event's data grows past `max_event` characters."""

    max_event: int = MAX_EVENT_CHARS
    _type: str = ""
    _data: list[str] = field(default_factory=list)
    _size: int = 0
    _id: str | None = None

    def feed(self, line: str) -> Event | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._type = value
        elif name == "data":
            self._size += len(value) + 1
            if self._size > self.max_event:
                raise StreamTooLarge(f"an event longer than {self.max_event} characters")
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._id = value
        return None

    def _dispatch(self) -> Event | None:
        if not self._data:
            self._type = ""
            return None
        event = Event(self._type or "message", "\n".join(self._data), self._id)
        self._type, self._data, self._size = "", [], 0
        return event


def state_change(event: Event) -> dict[str, dict[str, str]] | None:
    """`changed` of a `state` event's StateChange ({account: {type: state}}), None when the
    data is not one."""
    try:
        body = json.loads(event.data)
    except ValueError:
        return None
    changed = body.get("changed") if isinstance(body, dict) else None
    if not isinstance(changed, dict):
        return None
    out: dict[str, dict[str, str]] = {}
    for account, types in changed.items():
        if isinstance(account, str) and isinstance(types, dict):
            out[account] = {t: s for t, s in types.items()
                            if isinstance(t, str) and isinstance(s, str)}
    return out
