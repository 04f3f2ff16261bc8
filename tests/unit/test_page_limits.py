"""The admin page checks a form before it is sent with copies of the server's limits (issue #24):
each copy in `web/*.js` must equal the server's value, or the page refuses what a save would
take (or lets through what it refuses, with a 422 the form cannot place on a field)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from messageweave import web
from messageweave.config import accounts, features, fields, model

WEB = Path(web.__file__).parent


def js_constant(module: str, name: str) -> object:
    """The value of `const NAME = …;` (optionally exported) in `web/<module>`: a number, a
    string or an array of strings (JSON literals all)."""
    source = (WEB / module).read_text(encoding="utf-8")
    found = re.search(rf"^(?:export )?const {name} = (.+?);$", source, re.MULTILINE | re.DOTALL)
    assert found, f"{module} defines no const {name}"
    return json.loads(found.group(1).replace("\n", " "))


@pytest.mark.parametrize(("module", "name", "server"), [
    ("business-form.js", "MIN_TOKEN_CHARS", model.MIN_TOKEN_CHARS),
    ("rules-editor.js", "MAX_RULES", features.MAX_RULES),
    ("rules.js", "DIGEST_MAX", features.DIGEST_THRESHOLD_MAX),
    ("zones.js", "SHORTLIST", list(model.SHORTLIST_TIMEZONES)),
])
def test_each_limit_the_page_copies_is_the_servers(module: str, name: str, server: object) -> None:
    """Catches a server limit changed without its copy in the page (a token length, the rule
    count, the digest threshold, the zone shortlist)."""
    assert js_constant(module, name) == server


def test_the_page_falls_back_to_the_servers_default_time_zone() -> None:
    """Catches the page proposing another zone than the server's default when the browser's
    own is not offered (`|| "Asia/Shanghai"` in each module that picks one)."""
    fallbacks = [
        (path.name, zone)
        for path in sorted(WEB.glob("*.js"))
        for zone in re.findall(r'\|\|\s*"([A-Za-z]+/[A-Za-z_]+)"',
                               path.read_text(encoding="utf-8"))
    ]
    assert fallbacks, "no module of the page falls back to a zone any more"
    assert {zone for _, zone in fallbacks} == {model.DEFAULT_TIMEZONE}, fallbacks


def test_each_field_length_the_page_allows_is_the_declared_one() -> None:
    """Catches a business form input whose `maxlength` is not its field's declared limit
    (`config.fields`): the page would cut a value the server takes, or let one through that
    the save refuses with a 422."""
    html = (WEB / "index.html").read_text(encoding="utf-8")
    allowed = {}
    for tag in re.findall(r"<(?:input|textarea)\b[^>]*>", html):
        name = re.search(r'\bid="f-([a-z_]+)"', tag)
        limit = re.search(r'\bmaxlength="(\d+)"', tag)
        if name and limit:
            allowed[name.group(1)] = int(limit.group(1))
    declared = {name: fields.FIELD[name].max_chars for name in allowed if name in fields.FIELD}
    assert len(declared) >= 13, "the business form has fewer length-limited fields than before"
    assert {name: allowed[name] for name in declared} == declared


def test_the_accounts_card_allows_what_an_account_id_and_name_may_be() -> None:
    """Catches the accounts card's id or name input (issue #35) cutting, or letting through, a
    value the server's `config.accounts` refuses or takes: the `maxlength`s, the name limit and
    the id pattern the form checks before sending."""
    html = (WEB / "index.html").read_text(encoding="utf-8")
    limits = {name: int(limit) for name, limit in re.findall(
        r'<input\b[^>]*\bid="acct-(id|name)"[^>]*\bmaxlength="(\d+)"', html)}
    longest_id = int(re.search(r"\{0,(\d+)\}\$$", accounts.ACCOUNT_ID_PATTERN).group(1)) + 1
    assert limits == {"id": longest_id, "name": accounts.NAME_MAX_CHARS}
    assert js_constant("account-form.js", "NAME_MAX_CHARS") == accounts.NAME_MAX_CHARS
    source = (WEB / "account-form.js").read_text(encoding="utf-8")
    pattern = re.search(r"^const ID_PATTERN = /(.+)/;", source, re.MULTILINE)
    assert pattern and pattern.group(1) == accounts.ACCOUNT_ID_PATTERN
