"""Splitting a text into messages that fit Telegram's limit, counted in UTF-16 units."""

from __future__ import annotations

import unicodedata

MAX_MESSAGE_UTF16 = 4096


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units, the unit of Telegram's message limit."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def split_text(text: str, limit: int = MAX_MESSAGE_UTF16) -> list[str]:
    """Cut `text` into chunks of at most `limit` UTF-16 units, in order.

    A text that fits is returned unchanged. Otherwise each cut goes at the last newline in the
    second half of the window, else the last space there (the separator is dropped), else as
    late as possible without separating a character from its combining marks, emoji modifiers
    or ZWJ partners (never inside a surrogate pair: Python strings hold whole code points).
    Chunks that are only whitespace are left out, because Telegram refuses them.
    """
    if limit < 2:
        raise ValueError("limit must be at least 2 UTF-16 units")
    chunks: list[str] = []
    rest = text
    while utf16_len(rest) > limit:
        end, resume = _split_point(rest, _fitting_prefix(rest, limit))
        chunks.append(rest[:end])
        rest = rest[resume:]
    chunks.append(rest)
    return [chunk for chunk in chunks if chunk.strip()]


def _fitting_prefix(text: str, limit: int) -> int:
    """How many leading code points of `text` fit into `limit` UTF-16 units."""
    units = 0
    for index, char in enumerate(text):
        units += 2 if ord(char) > 0xFFFF else 1
        if units > limit:
            return index
    return len(text)


def _split_point(text: str, end: int) -> tuple[int, int]:
    """(end of this chunk, start of the next) for a text longer than its first `end` chars."""
    floor = end // 2
    for separator in ("\n", " "):
        # A separator just past the window can go too: it is dropped, not sent.
        at = text.rfind(separator, floor, end + 1)
        if at > 0:
            return at, at + 1
    at = end
    while at > floor and _holds_together(text, at):
        at -= 1
    return (end, end) if at == floor else (at, at)


def _holds_together(text: str, at: int) -> bool:
    """Whether text[at - 1] and text[at] belong to one visible character."""
    before, after = ord(text[at - 1]), ord(text[at])
    if after == 0x200D or before == 0x200D:  # zero-width joiner sequences
        return True
    if unicodedata.combining(text[at]) or 0xFE00 <= after <= 0xFE0F or 0xE0100 <= after <= 0xE01EF:
        return True
    if 0x1F3FB <= after <= 0x1F3FF or 0xE0020 <= after <= 0xE007F:  # skin tones, flag tags
        return True
    if _is_regional_indicator(before) and _is_regional_indicator(after):
        run = 0
        while at - 1 - run >= 0 and _is_regional_indicator(ord(text[at - 1 - run])):
            run += 1
        return run % 2 == 1  # flags are pairs of regional indicators
    return False


def _is_regional_indicator(code_point: int) -> bool:
    return 0x1F1E6 <= code_point <= 0x1F1FF
