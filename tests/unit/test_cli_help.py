"""Every operator command documents itself: one example in its --help, and the `--data-dir` of
`messageweave run` on each one that talks to the instance."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from messageweave.cli import app

WITH_DATA_DIR = [["diagnose"], ["test-notify"], ["bootstrap"], ["drain"], ["reconcile"],
                 ["audit"], ["dlq", "list"], ["dlq", "replay"], ["run"], ["accounts"], ["trace"]]
# The operator commands that act on one mailbox (issue #35).
WITH_ACCOUNT = [["reconcile"], ["audit"], ["dlq", "list"], ["dlq", "replay"], ["trace"]]


@pytest.mark.parametrize("command", [*WITH_DATA_DIR, ["serve"], ["service", "install"],
                                     ["service", "uninstall"], ["service", "status"]],
                         ids=" ".join)
def test_help_shows_one_example(command: list[str]) -> None:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert result.output.count("Example: ") == 1, result.output
    assert f"Example: messageweave {' '.join(command)}" in result.output


@pytest.mark.parametrize("command", WITH_DATA_DIR, ids=" ".join)
def test_every_instance_command_takes_data_dir(command: list[str]) -> None:
    """Bug: `drain` and `dlq` had no --data-dir, so they could not find an embedded instance
    outside the default data directory."""
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert "--data-dir" in result.output, result.output


@pytest.mark.parametrize("command", WITH_ACCOUNT, ids=" ".join)
def test_every_one_mailbox_command_takes_account(command: list[str]) -> None:
    """Catches an operator command acting on one mailbox that cannot be pointed at another
    account (issue #35), so it would act on the default account's mailbox whatever was meant."""
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert "--account" in result.output, result.output
