"""One line of `messageweave diagnose`: a check's name, `ok` / `warn` / `fail`, what it found
and, unless `ok`, the one thing to do about it; and how such lines are printed (`diagnose`,
`service status`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from messageweave.cli.common import console

Status = Literal["ok", "warn", "fail"]
_MARKS = {"ok": "[green]ok  [/]", "warn": "[yellow]warn[/]", "fail": "[red]fail[/]"}


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    remedy: str = ""


def ok(name: str, detail: str) -> Check:
    return Check(name, "ok", detail)


def print_checks(checks: list[Check]) -> None:
    for check in checks:
        console.print(f"{_MARKS[check.status]} [bold]{check.name}[/]: {check.detail}",
                      highlight=False)
        if check.remedy and check.status != "ok":
            console.print(f"      → {check.remedy}", highlight=False)
