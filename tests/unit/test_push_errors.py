"""`mail.push` raises its own errors and `api.mailbox` answers them (issue #24): the status,
code and `Retry-After` a client sees must stay the ones reference §2 lists."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from messageweave.api import mailbox
from messageweave.errors import ApiError
from messageweave.mail import push

REFERENCE = Path(__file__).parents[2] / "docs" / "reference.md"


def error_table() -> dict[tuple[int, str], bool]:
    """Reference §2's rows: (status, code) → whether `Retry-After` accompanies it."""
    text = REFERENCE.read_text(encoding="utf-8")
    section = text[text.index("## 2. Error envelope"):text.index("## 3. Routes")]
    rows: dict[tuple[int, str], bool] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].isdigit():
            for code in re.findall(r"`([a-z_]+)`", cells[1]):
                rows[(int(cells[0]), code)] = cells[3] != "—"
    return rows


def push_errors() -> list[push.PushError]:
    """One instance of every error `mail.push` raises: each subclass with its own code, and
    `PushUnavailable` with every code the module gives it."""
    found: list[push.PushError] = []
    todo = [push.PushError]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls is not push.PushError and cls is not push.PushUnavailable:
            found.append(cls())
    source = inspect.getsource(push)
    codes = set(re.findall(r'PushUnavailable\("([a-z_]+)"\)', source))
    assert codes, "mail.push gives PushUnavailable no code of its own any more"
    found.extend(push.PushUnavailable(code) for code in sorted(codes | {"service_unavailable"}))
    return found


def answer(exc: push.PushError) -> ApiError:
    with pytest.raises(ApiError) as raised, mailbox._push_errors():
        raise exc
    return raised.value


@pytest.mark.parametrize("exc", push_errors(), ids=lambda exc: f"{type(exc).__name__}:{exc.code}")
def test_every_push_error_is_answered_as_reference_section_2_lists_it(
    exc: push.PushError,
) -> None:
    """Catches a new `PushError` without a status in `api.mailbox` (the client would get a
    500), and a mapping that changed what a client sees: a status or code §2 does not list, or
    a `Retry-After` added to or dropped from a retryable answer."""
    error = answer(exc)
    table = error_table()
    assert (error.status, error.code) in table, (error.status, error.code)
    assert error.retry is table[(error.status, error.code)]
