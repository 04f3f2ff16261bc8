"""The mail-source seam (issue #33): the pipeline, the chat and the routes that read mail for
them speak to `mail.source.MailSource`, never to the JMAP client, so an IMAP source fits."""

from __future__ import annotations

import ast
from pathlib import Path

import messageweave

PACKAGE = Path(messageweave.__file__).parent
# What must not know which mail protocol is configured.
NEUTRAL = [*sorted((PACKAGE / "pipeline").glob("*.py")), *sorted((PACKAGE / "chat").rglob("*.py")),
           PACKAGE / "api" / "rules.py", PACKAGE / "api" / "trace.py",
           PACKAGE / "cli" / "trace.py"]


def _jmap_uses(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "messageweave.mail.jmap"):
            found.append(f"{path.name}:{node.lineno} imports {node.module}")
        elif isinstance(node, ast.Attribute) and node.attr == "jmap" and isinstance(
                node.ctx, ast.Load):
            found.append(f"{path.name}:{node.lineno} calls .jmap")
    return found


def test_the_pipeline_and_the_chat_never_reach_the_jmap_client() -> None:
    """Catches a chat feature, a notification path or a trace wired to `JmapClient` (an import
    of `mail.jmap`, a `svc.jmap()`): it would work on JMAP and break on any other source, the
    `if mail_source == …` the seam exists to avoid."""
    assert [use for path in NEUTRAL for use in _jmap_uses(path)] == []
