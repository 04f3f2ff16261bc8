"""The lock files hold a pin for every dependency pyproject.toml names, within its range:
installs use `--no-deps` for the package itself, so a dependency added to pyproject.toml but
not locked (`scripts/lock.sh` not run) would otherwise be missing only at run time."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _pins(lock: str) -> dict[str, str]:
    text = (ROOT / lock).read_text()
    return {canonicalize_name(name): version
            for name, version in re.findall(r"^([A-Za-z0-9_.\-]+)==([^\s;\\]+)", text, re.M)}


@pytest.mark.parametrize(("lock", "groups"), [
    ("requirements.lock", ["dependencies"]),
    ("requirements-test.lock", ["dependencies", "test"]),
])
def test_every_dependency_is_locked_within_its_range(lock: str, groups: list[str]) -> None:
    pins = _pins(lock)
    for group in groups:
        specs = PROJECT[group] if group == "dependencies" else \
            PROJECT["optional-dependencies"][group]
        for spec in specs:
            requirement = Requirement(spec)
            version = pins.get(canonicalize_name(requirement.name))
            assert version is not None, f"{requirement.name} is not in {lock}: run scripts/lock.sh"
            assert requirement.specifier.contains(version, prereleases=True), \
                f"{lock} pins {requirement.name}=={version}, outside {requirement.specifier}"


def test_both_locks_pin_the_same_runtime_versions() -> None:
    runtime, test = _pins("requirements.lock"), _pins("requirements-test.lock")
    assert {name: test.get(name) for name in runtime} == runtime
