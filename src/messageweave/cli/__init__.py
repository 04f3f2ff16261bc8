"""The `messageweave` command: the Typer app, with each group's commands registered on it.

- `serve`: `run` (all-in-one) and `serve` (container mode);
- `ops`: `diagnose`, `test-notify`, `bootstrap`;
- `pipeline`: `drain`, `dlq list`, `dlq replay`;
- `mailbox`: `reconcile`, `audit`;
- `trace`: `trace` (where is my mail?).

What several of them need lives in `common`; the command modules import only that, never
each other or this package.
"""

from __future__ import annotations

import typer

from messageweave.cli import mailbox, ops, pipeline, serve, trace

app = typer.Typer(help="MessageWeave: your JMAP mailbox, in Telegram.", no_args_is_help=True)

serve.register(app)
ops.register(app)
pipeline.register(app)
mailbox.register(app)
trace.register(app)


def main() -> None:
    """The console script `messageweave` (and `python -m messageweave.cli`)."""
    app()
