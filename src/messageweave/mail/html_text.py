"""HTML mail as the text a reader sees (issue #16): what the summary excerpt and the model read
when a mail has no text/plain part. lxml parses, inscriptis (Apache-2.0) lays the text out; both
are imported by the first conversion, not before, so an idle instance never holds them
(issue #14).

The HTML is whatever a sender wrote, so:
- at most `MAX_INPUT_BYTES` of it is parsed (the rest is cut and the text marked truncated);
- lxml's HTML parser reads no DTD and no network (`no_network`), expands no entity but HTML's
  own, and stops at libxml2's nesting limit (255 levels; no `huge_tree`), which also bounds
  the converter's recursion;
- scripts, styles, the head and hidden elements are removed, then every attribute, and tables
  become plain lines, before inscriptis lays anything out: its CSS margins and paddings (up to
  100,000 em each), list numbers (`start`, `value`) and column alignment would let a few
  kilobytes of HTML grow into hundreds of megabytes of text. What is left writes text at most
  a small multiple of the input's size, so the time and memory of one conversion are bounded.
- every pass over the text is linear (issue #32: the tidy's old `[ \t]+\n` was quadratic on a
  run of spaces and held the GIL), so the worst shapes at the cap take about a second, in a
  worker thread that leaves the event loop free (`bench/html_text.py`, docs/benchmarks.md).
"""

from __future__ import annotations

import functools
import logging
import re
from typing import Any

log = logging.getLogger(__name__)

MAX_INPUT_BYTES = 512 * 1024

_DROPPED = ("script", "style", "head", "title", "template")
_BLOCKS = frozenset({"table", "thead", "tbody", "tfoot", "tr", "caption"})
_CELLS = frozenset({"td", "th"})
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden|mso-hide\s*:\s*all", re.I)
_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*>")
_BLANK_LINES = re.compile(r"\n{3,}")


def cut_utf8(text: str, max_bytes: int) -> tuple[str, bool]:
    """`text` cut to at most `max_bytes` of UTF-8, characters kept whole; and whether it was cut."""
    encoded = text.encode("utf-8")
    if len(encoded) <= max_bytes:
        return text, False
    return encoded[:max_bytes].decode("utf-8", errors="ignore"), True


def html_to_text(html: str) -> tuple[str, bool]:
    """The readable text of `html`: no tags, entities decoded, scripts and styles dropped, one
    line per block, list items bulleted, link texts without their targets (a tracking URL would
    fill the excerpt). Also whether the input was cut at `MAX_INPUT_BYTES`."""
    html, cut = cut_utf8(html, MAX_INPUT_BYTES)
    html = _XML_DECLARATION.sub("", html, count=1)  # lxml refuses one in a str
    if not html.strip():
        return "", cut
    lxml_html, convert = _libraries()
    parser = lxml_html.HTMLParser(no_network=True, remove_comments=True, remove_pis=True)
    try:
        tree = lxml_html.document_fromstring(html, parser=parser)
    except Exception:  # lxml's ParserError: no element at all (only a comment, a doctype)
        return "", cut
    _simplify(tree)
    try:
        text = convert(tree)
    except Exception as exc:  # a converter bug must not lose the mail: keep the bare text
        log.warning("html conversion failed (%s); using the bare text", type(exc).__name__)
        text = " ".join(s for s in (t.strip() for t in tree.itertext()) if s)
    return _tidy(text), cut


@functools.cache
def _libraries() -> tuple[Any, Any]:
    """lxml.html and a converter of a parsed tree, imported on first use."""
    import lxml.html  # type: ignore[import-untyped]
    from inscriptis.css_profiles import CSS_PROFILES  # type: ignore[import-untyped]
    from inscriptis.html_engine import Inscriptis  # type: ignore[import-untyped]
    from inscriptis.html_properties import Display  # type: ignore[import-untyped]
    from inscriptis.model.config import ParserConfig  # type: ignore[import-untyped]
    from inscriptis.model.html_element import HtmlElement  # type: ignore[import-untyped]

    # Firefox's defaults, but lists unindented: nested 255 deep, 4 spaces a level would put a
    # kilobyte before every item. The bullets (*, +, o, -) still show the nesting.
    css = dict(CSS_PROFILES["strict"])
    for tag in ("ul", "ol"):
        css[tag] = HtmlElement(display=Display.block)

    def convert(tree: Any) -> str:
        return str(Inscriptis(tree, ParserConfig(css=css, display_links=False)).get_text())

    return lxml.html, convert


def _simplify(tree: Any) -> None:
    """Remove what a reader never sees and every attribute; tables become lines of cells."""
    doomed = [el for el in tree.iter() if _invisible(el)]
    for el in doomed:
        if el.getparent() is not None:
            el.drop_tree()  # keeps the text after it (its tail)
    for el in tree.iter():
        if not isinstance(el.tag, str):
            continue
        el.attrib.clear()
        if el.tag in _BLOCKS:
            el.tag = "div"
        elif el.tag in _CELLS:
            el.tag = "span"
            el.tail = " " + (el.tail or "")


def _invisible(el: Any) -> bool:
    if not isinstance(el.tag, str):
        return False
    if el.tag in _DROPPED or "hidden" in el.attrib:
        return True
    return bool(_HIDDEN_STYLE.search(el.get("style") or ""))


def _tidy(text: str) -> str:
    r"""No spaces or tabs at a line's end, at most one blank line in a row, none around. Line by
    line: the pattern `[ \t]+\n` would retry a run of spaces that no newline ends from each of
    its characters (quadratic, holding the GIL: 100,000 spaces took 5 s)."""
    lines = text.replace("\r\n", "\n").replace("\xa0", " ").split("\n")
    text = "\n".join(line.rstrip(" \t") for line in lines)
    return _BLANK_LINES.sub("\n\n", text).strip()
