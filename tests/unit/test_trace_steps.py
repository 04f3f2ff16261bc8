"""The trace's step vocabulary (`pipeline.trace_steps`, issue #38 item 7) against the page's
words for it (`web/strings-ops.js`: the page translates the JSON steps itself)."""

from __future__ import annotations

import re
from pathlib import Path

from messageweave.pipeline import trace_steps
from messageweave.pipeline.trace_steps import TraceStep

_STRINGS = Path(trace_steps.__file__).parents[1] / "web" / "strings-ops.js"
# A `trace.step.<kind>` entry with its English and its Chinese words.
_ENTRY = re.compile(r'"trace\.step\.([a-z_]+)":\s*\["[^"]+",\s*"[^"]+"\]')


def _kinds() -> set[str]:
    found: set[str] = set()
    todo = list(TraceStep.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if "kind" in vars(cls):
            found.add(cls.kind)
    return found


def test_the_page_has_words_for_every_step_kind_the_trace_gives() -> None:
    """Catches: a step kind the trace gives with no `trace.step.<kind>` words in the page's
    table, which the page then shows as the raw kind (a mail a backlog digest left out was
    shown as `left_out`)."""
    kinds = _kinds()
    assert {"received", "seen", "delivered", "left_out", "lost"} <= kinds, kinds
    translated = set(_ENTRY.findall(_STRINGS.read_text(encoding="utf-8")))
    assert sorted(kinds - translated) == []
