"""The Read reply's pages and the attachments' names (issue #25, `pipeline.reading`)."""

from __future__ import annotations

from messageweave.chat.telegram import MAX_MESSAGE_UTF16
from messageweave.mail.jmap import Attachment
from messageweave.pipeline import reading

MORE = "… {count} more characters, open it in your mail client"


def test_a_short_text_is_one_message_without_a_note() -> None:
    """Catches a "more characters" note under a mail that was shown whole."""
    assert reading.paginate("Subject: hi\n\nHello.", False, MORE) == ["Subject: hi\n\nHello."]


def test_a_long_text_is_three_messages_and_counts_what_is_left() -> None:
    """Catches a Read over 3 messages, a message over Telegram's limit, or a wrong count of
    the characters left out."""
    text = "\n".join(f"line {n:06d} " + "x" * 80 for n in range(400))
    pages = reading.paginate(text, False, MORE)
    assert len(pages) == 3
    assert all(len(p) <= MAX_MESSAGE_UTF16 for p in pages)
    shown, note = pages[-1].rsplit("\n\n", 1)
    shown_to = text.index(shown) + len(shown)
    assert note == MORE.format(count=len(text[shown_to:].strip()))


def test_a_text_the_server_cut_says_plus() -> None:
    """Catches an exact count claimed for a text the server's cap cut."""
    assert reading.paginate("short", True, MORE)[-1].endswith("… 1+ more characters, open it "
                                                              "in your mail client")


def test_names_are_sanitized_and_the_type_is_the_mails() -> None:
    """Catches a path, a control character or a leading dot reaching Telegram as a name."""
    def named(name: str | None, media: str = "application/pdf") -> str:
        return reading.safe_filename(Attachment("2", "b", name, media, 10))

    assert named("../../etc/passwd") == "passwd"
    assert named("C:\\Users\\x\\report.pdf") == "report.pdf"
    assert named("a\x00b\nc.pdf") == "a_b_c.pdf"
    assert named(".hidden") == "hidden"
    assert named("what?.pdf") == "what_.pdf"
    assert named(None) == "attachment.pdf"
    long = named("n" * 300 + ".pdf")
    assert len(long) == reading.MAX_FILENAME_CHARS and long.endswith(".pdf")


def test_only_small_jpeg_and_png_go_as_photos() -> None:
    """Catches an image over sendPhoto's 10 MB, or a GIF (sendPhoto flattens it), sent as a
    photo."""
    def photo(media: str, size: int) -> bool:
        return reading.as_photo(Attachment("2", "b", "x", media, size))

    assert photo("image/png", 1000) and photo("image/jpeg", reading.MAX_PHOTO_BYTES)
    assert not photo("image/png", reading.MAX_PHOTO_BYTES + 1)
    assert not photo("image/gif", 1000) and not photo("application/pdf", 1000)
