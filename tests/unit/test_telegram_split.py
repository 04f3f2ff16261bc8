"""split_text and classify: the pure parts of the Telegram sender."""

from __future__ import annotations

import pytest

from messageweave.chat.telegram import (
    MAX_MESSAGE_UTF16,
    FailureClass,
    TelegramSendError,
    classify,
    split_text,
    utf16_len,
)


def test_utf16_length_counts_astral_characters_twice() -> None:
    assert utf16_len("abc") == 3
    assert utf16_len("😀") == 2
    assert utf16_len("中文") == 2


def test_a_text_that_fits_is_returned_unchanged() -> None:
    text = "  From: a\nSubject: b\n"
    assert split_text(text) == [text]
    assert split_text("x" * MAX_MESSAGE_UTF16) == ["x" * MAX_MESSAGE_UTF16]


def test_empty_and_blank_texts_give_no_chunks() -> None:
    assert split_text("") == []
    assert split_text(" \n\t ") == []


def test_cuts_at_the_last_newline_and_drops_it() -> None:
    text = "a" * 3000 + "\n" + "b" * 3000
    assert split_text(text) == ["a" * 3000, "b" * 3000]


def test_a_newline_just_past_the_window_is_used() -> None:
    text = "a" * 4096 + "\n" + "b"
    assert split_text(text) == ["a" * 4096, "b"]


def test_falls_back_to_a_space_when_no_newline_is_in_the_second_half() -> None:
    text = "intro\n" + "word " * 1000
    chunks = split_text(text)
    assert chunks[0].startswith("intro\n")  # the early newline would leave a tiny chunk
    assert all(utf16_len(c) <= MAX_MESSAGE_UTF16 for c in chunks)
    assert " ".join(chunks) == text


def test_hard_cut_never_splits_a_surrogate_pair() -> None:
    text = "a" + "😀" * 3000
    chunks = split_text(text)
    assert [utf16_len(c) for c in chunks] == [4095, 1906]
    assert "".join(chunks) == text


def test_hard_cut_keeps_zwj_sequences_skin_tones_and_combining_marks_whole() -> None:
    family = "👨\u200d👩\u200d👧"  # 8 UTF-16 units
    text = "x" * 4090 + family + "tail"
    first, second = split_text(text)
    assert first == "x" * 4090 and second == family + "tail"

    thumbs = "👍🏽"
    first, second = split_text("x" * 4093 + thumbs)
    assert (first, second) == ("x" * 4093, thumbs)

    accented = "e\u0301"
    first, second = split_text("x" * 4095 + accented)
    assert (first, second) == ("x" * 4095, accented)


def test_hard_cut_keeps_flags_whole() -> None:
    flags = "🇨🇳🇺🇸"  # two flags, 8 units
    chunks = split_text("x" * 4090 + flags)
    assert chunks == ["x" * 4090 + "🇨🇳", "🇺🇸"]


def test_every_chunk_fits_for_a_long_mixed_text() -> None:
    text = ("Line with 中文 and emoji 😀👍🏽 and a flag 🇩🇪.\n" * 800)[:-1]
    chunks = split_text(text)
    assert len(chunks) > 1
    assert all(0 < utf16_len(c) <= MAX_MESSAGE_UTF16 for c in chunks)
    assert "\n".join(chunks) == text


def test_a_small_limit_works_the_same_way() -> None:
    assert split_text("ab cd ef", limit=5) == ["ab cd", "ef"]


@pytest.mark.parametrize(
    ("status", "description", "retry_after", "expected"),
    [
        (429, "Too Many Requests: retry after 5", 5.0, FailureClass.RATE_LIMIT),
        (429, "Too Many Requests", None, FailureClass.RATE_LIMIT),
        (401, "Unauthorized", None, FailureClass.AUTH),
        (404, "Not Found", None, FailureClass.AUTH),
        (403, "Forbidden: bot was blocked by the user", None, FailureClass.PERMISSION),
        (400, "Bad Request: chat not found", None, FailureClass.NOT_FOUND),
        (400, "Bad Request: PEER_ID_INVALID", None, FailureClass.NOT_FOUND),
        (400, "Bad Request: message is too long", None, FailureClass.INVALID_PAYLOAD),
        (409, "Conflict: terminated by other getUpdates request", None, FailureClass.CONFLICT),
        (500, "Internal Server Error", None, FailureClass.TRANSIENT),
        (504, "Gateway Timeout", None, FailureClass.TRANSIENT),
        (418, "I'm a teapot", None, FailureClass.UNKNOWN),
    ],
)
def test_classify(
    status: int, description: str, retry_after: float | None, expected: FailureClass
) -> None:
    assert classify(status, description, retry_after) is expected


def test_only_transient_and_rate_limit_are_retryable() -> None:
    retryable = {c for c in FailureClass if c.retryable}
    assert retryable == {FailureClass.TRANSIENT, FailureClass.RATE_LIMIT}
    err = TelegramSendError(FailureClass.RATE_LIMIT, 3.0, "Too Many Requests: retry after 3")
    assert err.retryable
    assert str(err) == "telegram rate_limit: Too Many Requests: retry after 3 (retry after 3 s)"
