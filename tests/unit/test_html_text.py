"""HTML mail to text (`messageweave.mail.html_text`) and the text of JMAP body parts
(`messageweave.mail.jmap.body`): what is kept, what is dropped, and the guards against HTML
written to hurt (growth, entities, DTDs, size)."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from messageweave.mail import html_text
from messageweave.mail.html_text import MAX_INPUT_BYTES, html_to_text
from messageweave.mail.jmap import body


def text(html: str) -> str:
    return html_to_text(html)[0]


def test_entities_are_decoded_and_tags_gone() -> None:
    """Catches markup or raw entities left in the text."""
    assert text("<p>Caf&eacute; &amp; cr&egrave;me &#8364;3 &#x41;&nbsp;&lt;b&gt;</p>") == \
        "Café & crème €3 A <b>"


def test_scripts_styles_head_and_hidden_elements_are_dropped_but_the_text_after_them_kept(
) -> None:
    """Catches a script's code, a stylesheet, the title or text the reader never sees (hidden
    preheaders) in the text, and the words following a dropped element lost with it."""
    html = ("<html><head><title>Title</title><style>p{color:red}</style></head><body>"
            "<script>var x = 1 < 2;</script>one <style>.a{}</style>two"
            "<span style='DISPLAY: none !important'>ghost1</span> three"
            "<div hidden>ghost2</div><p style='visibility:hidden'>ghost3</p>"
            "<div style='mso-hide:all'>ghost4</div><template><p>ghost5</p></template> four"
            "<!-- a comment --></body></html>")
    assert text(html) == "one two three four"


def test_blocks_lists_and_tables_become_lines() -> None:
    """Catches blocks run together on one line, list items without bullets, and table cells glued
    to each other."""
    html = ("<h1>Title</h1><p>First para.</p><div>A div</div>line<br>break"
            "<ul><li>one</li><li>two<ul><li>inner</li></ul></li></ul>"
            "<ol start='7'><li>first</li><li value='9'>second</li></ol>"
            "<table><tr><th>Item</th><th>Price</th></tr><tr><td>Tea</td><td>€4</td></tr></table>")
    assert text(html) == ("Title\n\nFirst para.\n\nA div\nline\nbreak\n"
                          "* one\n* two\n+ inner\n1. first\n2. second\n"
                          "Item Price\nTea €4")


def test_links_keep_their_words_not_their_targets() -> None:
    """Catches tracking URLs filling the 300-character excerpt."""
    assert text('<p>Read <a href="https://t.example/c?id=123456789">the report</a> now.</p>') == \
        "Read the report now."


def test_an_xml_declaration_and_an_empty_document_are_no_error() -> None:
    """Catches lxml refusing a str with an encoding declaration, and an error on a document
    without any element."""
    assert text('<?xml version="1.0" encoding="utf-8"?><p>xhtml mail</p>') == "xhtml mail"
    assert html_to_text("") == ("", False)
    assert html_to_text("<!-- only a comment -->") == ("", False)
    assert html_to_text("   \n ") == ("", False)


def test_no_entity_of_a_dtd_is_expanded_and_no_file_is_read(tmp_path: Path) -> None:
    """Catches entity expansion (a billion laughs) and external entities or DTDs being loaded
    (XXE): lxml's HTML parser must leave them as they are."""
    secret = tmp_path / "secret.txt"
    secret.write_text("FILE-CONTENT-LEAKED")
    laughs = "".join(f'<!ENTITY l{n} "{f"&l{n - 1};" * 10}">' for n in range(1, 8))
    html = (f'<!DOCTYPE html [<!ENTITY l0 "lol">{laughs}'
            f'<!ENTITY xxe SYSTEM "file://{secret}">]>'
            f'<html><body><p>a &l7; b &xxe; c</p></body></html>')
    out = text(html)
    assert "FILE-CONTENT-LEAKED" not in out and "lol" not in out
    assert "a &l7; b &xxe; c" in out
    external = text(f'<!DOCTYPE html SYSTEM "file://{secret}"><p>x</p>')
    assert external == "x"


@pytest.mark.parametrize("bomb", [
    # CSS margins and paddings of up to 100,000 em each
    '<p style="margin-top:100000em;padding-left:100000em">x</p>',
    # column alignment: every row padded to the widest cell
    "<table><tr><td>" + "w" * 20000 + "</td></tr>" + "<tr><td>x</td></tr>",
    # list numbers of thousands of digits, and indentation 250 levels deep
    "<ol start='" + "9" * 4000 + "'><li value='" + "9" * 4000 + "'>x</li></ol>",
    "<ul><li>" * 250 + "<li>x</li>",
    "<div>" * 5000 + "x",
])
def test_hostile_html_gives_text_no_larger_than_its_input(bomb: str) -> None:
    """Catches a few kilobytes of HTML growing into hundreds of megabytes of text (inscriptis
    lays out what it is given: margins, paddings, list numbers, table columns), and the
    converter's recursion on deep nesting (libxml2 stops at 255 levels)."""
    html = (bomb * (MAX_INPUT_BYTES // len(bomb) + 1))[: MAX_INPUT_BYTES + 100]
    started = time.monotonic()
    out, cut = html_to_text(html)
    assert cut
    assert len(out) <= MAX_INPUT_BYTES
    assert time.monotonic() - started < 20  # about 0.3 s here; a blow-up takes minutes


def test_input_beyond_the_limit_is_cut_and_says_so() -> None:
    """Catches an unbounded input reaching the parser, and the cut not being reported."""
    para = "<p>" + "é" * 99 + "</p>"
    out, cut = html_to_text(para * (MAX_INPUT_BYTES // len(para.encode()) + 5))
    assert cut
    assert out.startswith("é" * 99) and set(out) <= {"é", "\n"}
    out, cut = html_to_text(para * 3)
    assert not cut and out == "\n\n".join(["é" * 99] * 3)


def test_a_converter_failure_keeps_the_bare_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """Catches a converter bug losing the mail's text. A test double: no input is known to make
    inscriptis raise, so the converter is replaced by one that does."""
    lxml_html, _ = html_text._libraries()

    def broken(tree: object) -> str:
        raise ValueError("converter bug")

    monkeypatch.setattr(html_text, "_libraries", lambda: (lxml_html, broken))
    assert text("<p>still <b>here</b></p><script>no</script>") == "still here"


def _raw(*parts: tuple[str | None, str | None, bool]) -> dict[str, object]:
    """An Email/get entry whose `textBody` has one part per (type, value, isTruncated)."""
    text_body, values = [], {}
    for n, (kind, value, truncated) in enumerate(parts):
        text_body.append({"partId": str(n), **({"type": kind} if kind is not None else {})})
        if value is not None:
            values[str(n)] = {"value": value, "isTruncated": truncated}
    return {"id": "e1", "textBody": text_body, "bodyValues": values}


def test_each_text_body_part_is_read_by_its_type() -> None:
    """Catches text/html parts in `textBody` (RFC 8621 falls back to them) read as plain text,
    inline images read at all, and a part without a type (plain, RFC 2045) skipped."""
    raw = _raw(("text/plain", "plain one", False), ("TEXT/HTML; charset=utf-8", "<p>h&amp;m</p>",
               False), ("image/png", "binary", False), (None, "untyped", False),
               ("text/plain", None, False))
    assert body.has_html(raw)
    assert body.text_body(raw, None) == ("plain one\nh&m\nuntyped", False)
    assert not body.has_html(_raw(("text/plain", "x", False)))


def test_the_cap_counts_utf8_bytes_of_the_text_and_a_server_cut_is_reported() -> None:
    """Catches the cap measured on the HTML instead of the text, characters split at the cap,
    and a part the server cut (`isTruncated`) reported as whole."""
    html = "<style>" + "x" * 5000 + "</style>" + "<p>" + "é" * 100 + "</p>"
    assert body.text_body(_raw(("text/html", html, False)), 51) == ("é" * 25, True)
    assert body.text_body(_raw(("text/html", html, False)), 500) == ("é" * 100, False)
    assert body.text_body(_raw(("text/plain", "short", True)), 500) == ("short", True)


def test_fetch_arguments_ask_for_part_types_and_room_for_html() -> None:
    """Catches part types not being fetched (then HTML cannot be told from text) and the server
    cutting HTML at the text's cap."""
    assert body.fetch_args(None) == {"fetchTextBodyValues": True,
                                     "bodyProperties": ["partId", "type"]}
    assert body.fetch_args(1000)["maxBodyValueBytes"] == 8000
    assert body.fetch_args(10 * MAX_INPUT_BYTES)["maxBodyValueBytes"] == 10 * MAX_INPUT_BYTES
    assert body.fetch_args(MAX_INPUT_BYTES // 2)["maxBodyValueBytes"] == MAX_INPUT_BYTES
    with pytest.raises(ValueError):
        body.fetch_args(0)


_FIRST_CONVERSION = """
import json, sys
import messageweave.app, messageweave.cli, messageweave.runtime
from messageweave.mail.jmap import body
seen = {"after_import": sorted(m for m in ("lxml", "inscriptis") if m in sys.modules)}
body.text_body({"textBody": [{"partId": "1", "type": "text/plain"}],
                "bodyValues": {"1": {"value": "plain"}}}, None)
seen["after_plain"] = sorted(m for m in ("lxml", "inscriptis") if m in sys.modules)
body.text_body({"textBody": [{"partId": "1", "type": "text/html"}],
                "bodyValues": {"1": {"value": "<p>html</p>"}}}, None)
seen["after_html"] = sorted(m for m in ("lxml", "inscriptis") if m in sys.modules)
print(json.dumps(seen))
"""


def test_lxml_and_inscriptis_are_imported_by_the_first_html_conversion_not_before() -> None:
    """Catches the converter loaded at start-up: an idle instance must not hold it (issue #14,
    idle RSS). Run in a fresh interpreter: this one has imported them already."""
    done = subprocess.run([sys.executable, "-c", _FIRST_CONVERSION], capture_output=True,
                          text=True, timeout=60, check=True)
    assert json.loads(done.stdout) == {"after_import": [], "after_plain": [],
                                       "after_html": ["inscriptis", "lxml"]}


_AT_THE_CAP = """
import asyncio, json, sys, time
from messageweave.mail.html_text import MAX_INPUT_BYTES as CAP, html_to_text

def fill(unit, size=CAP):
    return (unit * (size // len(unit) + 1))[:size]

SHAPES = {
    "pre_spaces": "<pre>" + " " * CAP,
    "pre_spaces_text": "<pre>x" + " " * CAP + "y</pre>",
    "pre_tabs_text": "<pre>x" + "\\t" * CAP + "y</pre>",
    "pre_nbsp_text": "<pre>x" + "&nbsp;" * (CAP // 6) + "y</pre>",
    "pre_blocks": fill("<pre> x \\n</pre>"),
    "deep_nesting": fill("<div><span><b>x"),
    "huge_table": "<table>" + fill("<tr><td>a</td><td>b</td></tr>"),
    "wide_row": "<table><tr>" + fill("<td>x</td>"),
    "tiny_elements": fill("<b>x</b>"),
    "list_items": "<ul>" + fill("<li>x"),
    "line_breaks": fill("<br>"),
}

async def measure(html):
    gaps, done = [0.0], asyncio.Event()
    async def tick():
        last = time.monotonic()
        while not done.is_set():
            await asyncio.sleep(0.005)
            gaps.append(time.monotonic() - last)
            last = time.monotonic()
    ticker = asyncio.create_task(tick())
    started = time.monotonic()
    await asyncio.to_thread(html_to_text, html)  # as Read and the summary call it
    took = time.monotonic() - started
    done.set()
    await ticker
    return took, max(gaps)

html_to_text("<p>warm</p>")
print(json.dumps({name: asyncio.run(measure(html)) for name, html in SHAPES.items()}))
"""


def test_hostile_shapes_at_the_input_cap_convert_fast_and_leave_the_event_loop_free() -> None:
    """Catches a super-linear pass over a mail's HTML (the tidy's `[ \\t]+\\n` on a run of
    spaces with no newline: 100,000 spaces took 5 s, the 512 KiB cap about 130 s) and a
    conversion that stalls the event loop while it runs in its thread (the regex held the
    GIL throughout). Each hostile shape at `MAX_INPUT_BYTES`, measured in a fresh interpreter
    so that the quadratic case fails at the timeout instead of running for minutes."""
    done = subprocess.run([sys.executable, "-c", _AT_THE_CAP], capture_output=True, text=True,
                          timeout=60, check=True)
    measured = json.loads(done.stdout)
    for shape, (took, gap) in measured.items():
        # quiet machine: about 10 ms for the whitespace shapes, up to 0.9 s for the others, the
        # loop held at most about 30 ms (pure Python yields the GIL every 5 ms); at a load of
        # 4.6 on 2 cores: up to 2.8 s and 0.2 s (bench/html_text.py)
        assert took < (1.0 if "spaces" in shape or "nbsp" in shape or "tabs" in shape
                       else 10.0), (shape, took)
        assert gap < 1.0, (shape, gap)


def test_the_tidy_writes_what_the_pattern_it_replaced_wrote() -> None:
    """Catches the linear tidy writing other text than `[ \t]+\n` did: spaces and tabs at
    each line's end dropped, no-break spaces as spaces, at most one blank line in a row, none
    at either end. Every mix of up to 6 of those characters, and a few longer texts."""
    old = re.compile(r"[ \t]+\n")

    def reference(value: str) -> str:
        value = old.sub("\n", value.replace("\r\n", "\n").replace("\xa0", " "))
        return re.sub(r"\n{3,}", "\n\n", value).strip()

    texts = [" a \t\nb  \r\n\n\n\nc\xa0\n", "\n \n\t\n x", "x \t", "a\r\rb \r \n"]
    texts += ["".join(chars) for size in range(7)
              for chars in itertools.product(" \t\n\r\xa0a", repeat=size)]
    for text in texts:
        assert html_text._tidy(text) == reference(text), repr(text)


def test_the_html_parts_of_one_mail_share_one_converter_input() -> None:
    """Catches a mail of many large HTML parts costing the CPU of one conversion at the cap
    per part (each part's value is fetched up to 512 KiB, so 40 parts were 40 conversions of
    up to a second each): what is past one input cap is left out and reported as cut."""
    size = 200 * 1024
    parts = [("text/html", f"<p>{n}" + "a" * (size - 8) + "</p>", False) for n in range(5)]
    out, cut = body.text_body(_raw(*parts, ("text/plain", "plain tail", False)), None)
    assert cut
    third = MAX_INPUT_BYTES - 2 * size - 4  # "<p>2" and as many "a" as the rest holds
    assert out == "\n".join(["0" + "a" * (size - 8), "1" + "a" * (size - 8),
                             "2" + "a" * third, "plain tail"])
