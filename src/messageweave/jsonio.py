"""JSON in and out: the one reader of JSON request bodies (`parse_json`: strict, depth-limited,
400 `invalid_request` rather than 500) and the one compact writer (`dump_json`: ledger records,
the encrypted configuration, the logs)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, TypeGuard

import orjson

from messageweave.errors import ApiError, invalid_request

# Deeper JSON is refused before `json.loads` sees it: the decoder recurses once per level, and
# no configuration, update or push object we read is nested more than a few levels.
MAX_JSON_DEPTH = 64
# A string literal (escapes included) or one bracket; brackets inside strings do not count.
_JSON_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
# `\ud800`-style escapes: a lone one decodes to a string that cannot be encoded as UTF-8 later.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def json_depth(text: str) -> int:
    """How deeply `text` nests arrays and objects, counted without recursion."""
    depth = deepest = 0
    for match in _JSON_TOKEN.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            deepest = max(deepest, depth)
        elif token in ("]", "}"):
            depth -= 1
    return deepest


def _json_text(body: bytes) -> str:
    """The body as text in the encoding JSON allows (UTF-8, -16 or -32), else 400."""
    try:
        return body.decode(json.detect_encoding(body))
    except (UnicodeDecodeError, LookupError) as exc:
        raise invalid_request() from exc


def check_json_depth(body: bytes) -> None:
    """400 invalid_request when `body` nests deeper than `MAX_JSON_DEPTH`. For preflight, which
    answers other malformed JSON itself (in its 200 body)."""
    try:
        text = _json_text(body)
    except ApiError:
        return  # not JSON text at all: the route's own parse says so
    if json_depth(text) > MAX_JSON_DEPTH:
        raise invalid_request()


# 19 digits in a row: possibly an integer past 64 bits, which orjson reads as a float.
_LONG_NUMBER = re.compile(rb"[0-9]{19}")


def _fast_json(body: bytes) -> bool:
    """Whether orjson may read `body`: UTF-8, no long number, and too few brackets to nest
    deeper than `MAX_JSON_DEPTH` (a Telegram update, a push), so no depth scan is needed."""
    return (body.count(b"{") + body.count(b"[") <= MAX_JSON_DEPTH
            and json.detect_encoding(body) == "utf-8" and not _LONG_NUMBER.search(body))


def parse_json(body: bytes) -> Any:
    """The one reader of JSON request bodies: strict JSON (no NaN or Infinity, no lone UTF-16
    surrogate), nested at most `MAX_JSON_DEPTH` levels, else 400 invalid_request (never 500).

    Small UTF-8 bodies go to orjson first: where it succeeds it gives the value `json.loads`
    would (it refuses NaN, Infinity and lone surrogates itself); anything it refuses goes the
    exact way below, which decides, so the answers stay the same."""
    if _fast_json(body):
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
    text = _json_text(body)
    if json_depth(text) > MAX_JSON_DEPTH:
        raise invalid_request()
    try:
        value = json.loads(text, parse_constant=_reject_constant)
        if _SURROGATE_ESCAPE.search(text):  # a valid pair is one character; a lone half fails
            json.dumps(value, ensure_ascii=False).encode()
    except (ValueError, RecursionError) as exc:  # UnicodeEncodeError is a ValueError
        raise invalid_request() from exc
    return value


def dump_json(value: Any, default: Callable[[Any], Any] | None = None) -> str:
    """Compact JSON text, as `json.dumps(value, separators=(",", ":"), ensure_ascii=False)`
    writes it, by orjson (several times faster: the send log writes one per update, issue
    #26); the rare value orjson refuses (an integer past 64 bits, a key that is not a string)
    takes the stdlib's way. `default` turns an unknown type into one JSON knows."""
    try:
        return orjson.dumps(value, default=default).decode()
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=default)


def json_object(body: bytes) -> dict[str, Any]:
    """Parse a request body that must be a JSON object, else 400 invalid_request."""
    value = parse_json(body)
    if not isinstance(value, dict):
        raise invalid_request()
    return value


def is_int(value: object) -> TypeGuard[int]:
    """A JSON integer: an `int` that is not a `bool` (JSON's true/false are not numbers)."""
    return isinstance(value, int) and not isinstance(value, bool)
