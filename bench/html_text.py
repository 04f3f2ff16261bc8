"""Benchmark (not a test): the HTML-to-text conversion of one hostile mail at the input cap
(issue #32, finding 2), and how long it holds the event loop.

    .venv/bin/python -m bench.html_text                  # every shape at MAX_INPUT_BYTES
    .venv/bin/python -m bench.html_text --size 65536 pre_spaces_text list_items

Each shape is HTML written to be slow for one step of `mail.html_text.html_to_text` (lxml's
parse, the tree walk of `_simplify`, inscriptis's layout, the tidy), filled to `--size` bytes
(default the converter's cap, 512 KiB). It is converted the way Read and the summary do it, in
a worker thread (`asyncio.to_thread`), while a coroutine ticks every 5 ms on the event loop;
one line per shape prints the conversion's time, the longest gap between two ticks (what a
webhook or `/healthz` would wait) and the length of the text. A pass that holds the GIL (a
regular expression running inside C) shows as a gap as long as the conversion; pure Python
yields the GIL every 5 ms (`sys.getswitchinterval`), so it shows as gaps of a few ms.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable

from messageweave.mail.html_text import MAX_INPUT_BYTES, html_to_text

_TICK_S = 0.005


def _fill(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


SHAPES: dict[str, Callable[[int], str]] = {
    "pre_spaces": lambda n: "<pre>" + " " * n,
    "pre_spaces_text": lambda n: "<pre>x" + " " * n + "y</pre>",
    "pre_tabs_text": lambda n: "<pre>x" + "\t" * n + "y</pre>",
    "pre_nbsp_text": lambda n: "<pre>x" + "&nbsp;" * (n // 6) + "y</pre>",
    "spaces_text": lambda n: "<p>x" + " " * n + "y</p>",
    "pre_blocks": lambda n: _fill("<pre> x \n</pre>", n),
    "pre_lines": lambda n: "<pre>" + _fill(" \n", n),
    "newlines": lambda n: "<pre>" + "\n" * n,
    "deep_nesting": lambda n: _fill("<div><span><b>x", n),
    "huge_table": lambda n: "<table>" + _fill("<tr><td>a</td><td>b</td></tr>", n),
    "wide_row": lambda n: "<table><tr>" + _fill("<td>x</td>", n),
    "tiny_elements": lambda n: _fill("<b>x</b>", n),
    "tiny_elements_7": lambda n: _fill("<b>abcdefg</b>", n),
    "empty_elements": lambda n: _fill("<i></i>", n),
    "line_breaks": lambda n: _fill("<br>", n),
    "list_items": lambda n: "<ul>" + _fill("<li>x", n),
    "hidden": lambda n: _fill('<span style="display:none">x</span>', n),
    "style_spaces": lambda n: '<p style="display' + " " * n + 'x">a</p>',
    "entities": lambda n: _fill("&amp;", n),
    "words": lambda n: _fill("word ", n),
}


async def _measure(html: str) -> tuple[float, float, int]:
    """(seconds the conversion took, the longest gap between two ticks, the text's length)."""
    gaps, done = [0.0], asyncio.Event()

    async def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(_TICK_S)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(4 * _TICK_S)
    started = time.perf_counter()
    text, _ = await asyncio.to_thread(html_to_text, html)
    took = time.perf_counter() - started
    done.set()
    await ticker
    return took, max(gaps), len(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shapes", nargs="*", choices=[[], *SHAPES], default=[],
                        help="the shapes to measure (default: all)")
    parser.add_argument("--size", type=int, default=MAX_INPUT_BYTES, help="bytes of HTML")
    args = parser.parse_args()
    html_to_text("<p>warm up: the libraries are imported by the first conversion</p>")
    worst = (0.0, 0.0)
    for name in args.shapes or SHAPES:
        html = SHAPES[name](args.size)[:args.size]
        took, gap, chars = asyncio.run(_measure(html))
        worst = (max(worst[0], took), max(worst[1], gap))
        print(f"{name:16s} {len(html.encode()) / 1024:5.0f} KiB  convert {took:6.3f} s  "
              f"longest loop gap {gap * 1000:6.1f} ms  text {chars} chars", flush=True)
    print(f"worst: convert {worst[0]:.3f} s, loop gap {worst[1] * 1000:.1f} ms")


if __name__ == "__main__":
    main()
