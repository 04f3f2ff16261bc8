"""Missing test peers fail the suite with a remedy; they never turn into skips."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.peers.redis7 import RedisNotInstalled, start_debian_redis


def test_missing_redis_7_is_an_error_that_says_what_to_install(tmp_path: Path) -> None:
    """Catches the old `pytest.skip` when Debian's redis-server was missing: CI then passed
    without any Redis 7 case."""
    with pytest.raises(RedisNotInstalled, match=r"not installed at .*install-test-packages"):
        start_debian_redis(tmp_path, binary=str(tmp_path / "no-redis-server"))
