"""The `messageweave` command: the Typer app, with each group's commands registered on it.

- `serve`: `run` (all-in-one) and `serve` (container mode);
- `ops`: `diagnose`, `test-notify`, `bootstrap`;
- `pipeline`: `drain`, `dlq list`, `dlq replay`;
- `mailbox`: `reconcile`, `audit`;
- `trace`: `trace` (where is my mail?);
- `accounts`: `accounts` (the accounts the operator commands' `--account` names);
- `service`: `service install`, `service uninstall`, `service status` (a systemd user unit).

What several of them need lives in `common`; the command modules import only that, never
each other or this package. `serving` is what `run` and `serve` do once their options are
parsed (the process `serve` becomes); only `serve` imports it.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import typer


@functools.cache
def build_app() -> typer.Typer:
    """The Typer app with every group's commands, built once, on first use: importing this
    package loads no Typer, so the serving process (`messageweave.cli.serving`, which
    `messageweave serve` becomes) does not carry it (issue #14)."""
    import typer

    from messageweave.cli import accounts, mailbox, ops, pipeline, serve, service, trace, upgrade

    app = typer.Typer(help="MessageWeave: your JMAP mailbox, in Telegram.", no_args_is_help=True)
    serve.register(app)
    ops.register(app)
    pipeline.register(app)
    mailbox.register(app)
    trace.register(app)
    accounts.register(app)
    service.register(app)
    upgrade.register(app)
    return app


def __getattr__(name: str) -> typer.Typer:
    """`messageweave.cli.app` (tests drive it with Typer's `CliRunner`): `build_app()`."""
    if name == "app":
        return build_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """The console script `messageweave` (and `python -m messageweave.cli`)."""
    build_app()()
