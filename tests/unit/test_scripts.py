"""The Lua scripts' declared KEYS and ARGV names against their opening comments, and the
named call's checks (`messageweave.store.scripts.Script`)."""

import ast
import importlib
import re
from pathlib import Path

import pytest

import messageweave
from messageweave.store.scripts import Script

SRC = Path(messageweave.__file__).resolve().parent
_NAME = re.compile(r"^[a-z][a-z0-9_]*\*?$")


def _scripts() -> list[tuple[str, str, list[str]]]:
    """(module, name, the comment lines right above `name = Script(`) for every script."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "Script(" not in text:
            continue
        lines = text.splitlines()
        module = ".".join(("messageweave", *path.relative_to(SRC).with_suffix("").parts))
        for node in ast.parse(text).body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, ast.Name) and node.value.func.id == "Script"):
                above = []
                for line in reversed(lines[:node.lineno - 1]):
                    if not line.startswith("#"):
                        break
                    above.insert(0, line)
                for target in node.targets:
                    assert isinstance(target, ast.Name)
                    found.append((module, target.id, above))
    return found


def _declared(comment: list[str], part: str) -> tuple[str, ...]:
    """The names a comment gives after `KEYS:` or `ARGV:`: the list runs to the other one, to
    `→`, or to the end of its line (a line indented two spaces or more continues it); a
    parenthesised note after a name is not part of it."""
    text = ""
    for line in comment:
        body = line[1:]
        text += (" " if body.startswith("  ") else "\n") + body.strip()
    match = re.search(part + r":(.*?)(?=KEYS:|ARGV:|→|\n|$)", text)
    if match is None:
        return ()
    listed = match.group(1)
    while re.search(r"\([^()]*\)", listed):
        listed = re.sub(r"\([^()]*\)", "", listed)
    return tuple(item.strip() for item in listed.split(",") if item.strip())


SCRIPTS = _scripts()


def test_every_script_is_found() -> None:
    """Catches a change to how scripts are declared that would leave this check with nothing
    to compare (every script would pass unseen)."""
    assert len(SCRIPTS) >= 30


@pytest.mark.parametrize(("module", "name", "comment"), SCRIPTS,
                         ids=[f"{m}.{n}" for m, n, _ in SCRIPTS])
def test_declared_names_match_the_opening_comment(module: str, name: str,
                                                  comment: list[str]) -> None:
    """Catches a script whose KEYS/ARGV order, as the call checks it, differs from what its
    comment tells the reader (a key passed where the Lua reads another), and a script that
    lost its opening comment or its return line."""
    script = getattr(importlib.import_module(module), name)
    assert isinstance(script, Script)
    assert any(line.lstrip("# ").startswith("KEYS:") for line in comment), f"{name}: no KEYS:"
    assert "→" in "".join(comment), f"{name}: its comment does not say what it returns"
    keys, args = _declared(comment, "KEYS"), _declared(comment, "ARGV")
    assert all(_NAME.match(n) for n in keys + args), (name, keys, args)
    assert (keys, args) == (script.keys, script.args)


async def test_a_missing_or_extra_name_raises_before_redis_is_asked() -> None:
    """Catches a call that would run with a key or argument left out, misnamed or in excess:
    it raises at once (no Redis is even given), naming what is wrong."""
    script = Script("return 1", keys=("lock",), args=("owner", "ids*"))
    with pytest.raises(TypeError, match=r"missing \['owner'\]"):
        await script(None, keys={"lock": "k"}, args={"ids": []})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"unexpected \['key'\]"):
        await script(None, keys={"lock": "k", "key": "x"},  # type: ignore[arg-type]
                     args={"owner": "o", "ids": []})
    with pytest.raises(TypeError, match="'ids': one value given"):
        await script(None, keys={"lock": "k"}, args={"owner": "o", "ids": "x"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'owner': a list given"):
        await script(None, keys={"lock": "k"}, args={"owner": ["o"], "ids": []})  # type: ignore[arg-type]
