"""JMAP EventSource (RFC 8620 §7.3): the session's `eventSourceUrl` template, and the
`text/event-stream` it answers, read as the HTML Living Standard's server-sent events.

`expand` fills the template's level-1 variables (RFC 6570 §3.2.2: each value percent-encoded
outside the unreserved set). `SseParser` turns the stream's lines into `Event`s: `event:`,
`data:` (several lines joined with a newline), `id:`; a blank line dispatches; a line starting
with `:` is a comment; the default event type is `message`. `state_change` reads a `state`
event's data as an RFC 8620 StateChange.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from urllib.parse import quote

TEMPLATE_VARIABLES = ("types", "closeafter", "ping")


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


@dataclass
class SseParser:
    """Feed it the stream's lines (without their line ending); it returns each dispatched event."""

    _type: str = ""
    _data: list[str] = field(default_factory=list)
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
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._id = value
        return None

    def _dispatch(self) -> Event | None:
        if not self._data:
            self._type = ""
            return None
        event = Event(self._type or "message", "\n".join(self._data), self._id)
        self._type, self._data = "", []
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
