"""docs/reference.md must name every Redis key, TTL and route defined in code."""

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest
from fastapi import APIRouter
from starlette.routing import Route

import messageweave.api
from messageweave.config import fields
from messageweave.store import keys
from messageweave.web import static

DOC = (Path(__file__).resolve().parents[2] / "docs" / "reference.md").read_text()


def _key_constants() -> list[tuple[str, object]]:
    return [(name, value) for name, value in vars(keys).items()
            if name.isupper() and isinstance(value, str | int) and not isinstance(value, bool)]


def _key_templates() -> list[tuple[str, str]]:
    out = []
    for name, fn in vars(keys).items():
        if inspect.isfunction(fn) and fn.__module__ == keys.__name__:
            params = inspect.signature(fn).parameters
            out.append((name, fn(*(f"{{{p}}}" for p in params))))
    return out


@pytest.mark.parametrize(("name", "value"), _key_constants())
def test_every_key_constant_is_documented(name: str, value: object) -> None:
    assert f"`{name}`" in DOC, f"{name} is not named in docs/reference.md"
    assert str(value) in DOC, f"{name} = {value!r} is not in docs/reference.md"


@pytest.mark.parametrize(("name", "template"), _key_templates())
def test_every_key_template_is_documented(name: str, template: str) -> None:
    assert f"`{name}()`" in DOC, f"{name}() is not named in docs/reference.md"
    assert template in DOC, f"{template} is not in docs/reference.md"


def _routers() -> list[APIRouter]:
    """Every router of every `messageweave.api` module (found, not listed: a new module's
    routes cannot slip past this check), plus the page's."""
    routers = [static.router]
    for info in pkgutil.iter_modules(messageweave.api.__path__):
        module = importlib.import_module(f"messageweave.api.{info.name}")
        router = getattr(module, "router", None)
        if isinstance(router, APIRouter):
            routers.append(router)
    return routers


def _routes() -> list[tuple[str, str]]:
    out = []
    for router in _routers():
        for route in router.routes:
            assert isinstance(route, Route)
            out.extend((method, route.path) for method in sorted(route.methods))
    return out


@pytest.mark.parametrize(("method", "path"), _routes())
def test_every_route_is_documented(method: str, path: str) -> None:
    rows = [line for line in DOC.splitlines() if f"| `{path}` |" in line]
    assert rows, f"{path} has no row in docs/reference.md"
    assert any(method in row.split("|")[1] for row in rows), f"{method} {path} not documented"


def _section(title: str) -> str:
    start = DOC.index(f"\n### {title}")
    return DOC[start:DOC.index("\n### ", start + 1)]


def test_every_configuration_field_has_its_row_and_secrecy_in_the_fields_table() -> None:
    """Catches a business configuration field declared (`config.fields`) without its row in
    §5.1, a row for a field that no longer exists, or a row that calls a secret not secret
    (or the other way round)."""
    rows = {cells[1].strip().strip("`"): cells[3].strip()
            for cells in (line.replace("\\|", "or").split("|")
                          for line in _section("5.1").splitlines() if line.startswith("| `"))}
    assert set(rows) == set(fields.FIELD_NAMES)
    for spec in fields.FIELDS:
        assert rows[spec.name].startswith("yes") == spec.secret, spec.name


def test_the_length_limits_are_listed_in_the_order_they_are_checked() -> None:
    """Catches a length limit (§5.2 step 2) missing from the reference, with another number,
    or listed in another order than the declarations check them in."""
    rules = " ".join(_section("5.2").split())
    places = [rules.index(f"`{fields.MESSAGE_NAMES[name]}` {limit}")
              for name, limit in fields.MAX_CHARS.items()]
    assert places == sorted(places)
