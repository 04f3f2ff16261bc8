"""`mail.jmap.eventsource.LineSplitter` and `SseParser` on chunks cut anywhere (issue #32:
the stream is read raw, so the line endings are ours to find)."""

from __future__ import annotations

import pytest

from messageweave.mail.jmap.eventsource import (
    MAX_LINE_BYTES,
    Event,
    LineSplitter,
    SseParser,
    StreamTooLarge,
)

STREAM = (b"event: ping\r\ndata: {\"interval\": 30}\r\n\r\n"
          b"event: state\rdata: a\rdata: \xc3\xa9\r\r"
          b": a comment\nid: 7\ndata: b\n\n")
EVENTS = [Event("ping", '{"interval": 30}'), Event("state", "a\né"), Event("message", "b", "7")]


def events_of(chunks: list[bytes]) -> list[Event]:
    lines, parser = LineSplitter(), SseParser()
    found = []
    for chunk in chunks:
        for line in lines.feed(chunk):
            event = parser.feed(line)
            if event is not None:
                found.append(event)
    return found


@pytest.mark.parametrize("size", [1, 2, 3, 7, len(STREAM)])
def test_events_are_the_same_however_the_stream_is_cut(size: int) -> None:
    """Catches: a CRLF split between two chunks read as two line ends (a blank line that
    dispatches an event early), a CR-only ending not seen, or a UTF-8 character cut in two
    decoded wrong."""
    chunks = [STREAM[i:i + size] for i in range(0, len(STREAM), size)]
    assert events_of(chunks) == EVENTS


def test_a_line_just_under_the_cap_passes_and_one_over_it_raises() -> None:
    """Catches: a cap that counts the unfinished line wrong (off by a chunk, or never)."""
    lines = LineSplitter()
    assert lines.feed(b"x" * MAX_LINE_BYTES) == []
    assert lines.feed(b"\n") == ["x" * MAX_LINE_BYTES]
    with pytest.raises(StreamTooLarge, match="longer than"):
        lines.feed(b"y" * (MAX_LINE_BYTES + 1))
