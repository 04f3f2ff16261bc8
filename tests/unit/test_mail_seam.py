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


# Where the configured protocol may be compared: the place that builds the source, the table
# the rest asks (`mail.kinds`), and the configuration itself (which settings each source needs;
# it sits below `mail/` and cannot ask the table).
MAY_COMPARE_SOURCE = {PACKAGE / "services" / "peers.py", PACKAGE / "mail" / "kinds.py",
                      *(PACKAGE / "config").glob("*.py")}
_COMPARISONS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn, ast.Is, ast.IsNot)


def _source_comparisons(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare) and any(
                isinstance(op, _COMPARISONS) for op in node.ops) and any(
                isinstance(side, ast.Attribute) and side.attr == "mail_source"
                for side in (node.left, *node.comparators)):
            found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    return found


def test_only_the_source_builder_compares_mail_source() -> None:
    """Catches an `if cfg.mail_source == "imap"` outside `services` and `mail.kinds` (issue #33:
    a push holder, the scheduler, a probe or diagnose deciding by the protocol's name): each
    such branch is one more place a third source would have to be added to, and forgetting
    one runs the wrong holder or probe for it; they ask `mail.kinds.kind_of` instead."""
    paths = sorted(set(PACKAGE.rglob("*.py")) - MAY_COMPARE_SOURCE)
    assert [hit for path in paths for hit in _source_comparisons(path)] == []
