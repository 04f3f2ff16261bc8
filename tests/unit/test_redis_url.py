"""`REDIS_URL`'s cluster and sentinel forms: how they are read, when they put the service in setup
mode, and that their passwords never reach a log line (reference §4, §7.18)."""

import json
import logging

import pytest
from redis.asyncio.cluster import RedisCluster

from messageweave.logs import configure_logging, redis_url_secrets, scrub
from messageweave.settings import from_env
from messageweave.store.redis import connect
from messageweave.store.redis_url import RedisUrlError, parse_multi_node

KEY = "0f" * 32
SENTINEL_URL = ("redis+sentinel://app:d%40ta%3Apw@10.0.0.1:26379,10.0.0.2,[::1]:26380/mail-primary"
                "?sentinel_password=s%26ntinel-pw&db=2")


def test_a_sentinel_url_names_every_sentinel_its_primary_and_both_passwords() -> None:
    """Catches: a `redis+sentinel://` URL read as a plain host (its first sentinel taken for the
    Redis server, the data password sent to the sentinels and `sentinel_password` dropped)."""
    parsed = parse_multi_node(SENTINEL_URL)
    assert parsed.hosts == (("10.0.0.1", 26379), ("10.0.0.2", 26379), ("::1", 26380))
    assert parsed.master == "mail-primary"
    assert (parsed.username, parsed.password) == ("app", "d@ta:pw")
    assert parsed.query["sentinel_password"] == "s&ntinel-pw" and parsed.query["db"] == "2"
    client = connect(SENTINEL_URL)
    pool_kwargs = client.connection_pool.connection_kwargs
    assert pool_kwargs["password"] == "d@ta:pw" and pool_kwargs["db"] == 2
    sentinels = client.connection_pool.sentinel_manager.sentinels  # type: ignore[attr-defined]
    assert [s.connection_pool.connection_kwargs["password"] for s in sentinels] == [
        "s&ntinel-pw"] * 3


def test_a_cluster_url_gives_a_cluster_client_seeded_with_every_host() -> None:
    """Catches: `redis+cluster://h1,h2` refused as an unknown scheme, or read as one server
    (whose multi-key commands a cluster answers with MOVED)."""
    client = connect("rediss+cluster://:pw@127.0.0.1:7000,127.0.0.1:7001?ssl_cert_reqs=none")
    assert isinstance(client, RedisCluster)
    seeds = client.nodes_manager.startup_nodes
    assert sorted(seeds) == ["127.0.0.1:7000", "127.0.0.1:7001"]
    kwargs = client.nodes_manager.connection_kwargs
    assert kwargs["password"] == "pw" and kwargs["ssl_cert_reqs"] == "none"
    assert "SSL" in kwargs["connection_class"].__name__


@pytest.mark.parametrize("url", [
    "redis+sentinel://10.0.0.1:26379",  # no primary's name
    "redis+sentinel://10.0.0.1:26379/",
    "redis+cluster://",
    "redis+cluster://h:7000/0/x",
])
def test_a_malformed_multi_node_url_is_a_setup_mode_variable(url: str) -> None:
    """Catches: a `redis+sentinel://` URL without its primary's name accepted at startup, then
    failing on every command instead of the status naming REDIS_URL."""
    assert from_env({"REDIS_URL": url, "CONFIG_ENCRYPTION_KEY": KEY}).missing == ["REDIS_URL"]


def test_a_bad_port_is_refused_without_the_password() -> None:
    """Catches: an error about a cluster URL that quotes the URL, password and all."""
    with pytest.raises(RedisUrlError) as raised:
        parse_multi_node("redis+cluster://:hunter2-pw@h1:99999")
    assert "hunter2-pw" not in str(raised.value) and "port" in str(raised.value)


def test_well_formed_multi_node_urls_configure_the_service() -> None:
    for url in (SENTINEL_URL, "redis+cluster://:p@h1:7000,h2:7001", "rediss+cluster://h1:7000/"):
        assert from_env({"REDIS_URL": url, "CONFIG_ENCRYPTION_KEY": KEY}).configured, url


def test_sentinel_and_data_passwords_never_reach_a_log_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Catches: `?sentinel_password=…` written as is in a log line (only `user:pass@` was
    redacted), or the decoded data password echoed by an error."""
    assert scrub(f"cannot reach {SENTINEL_URL}", []) == (
        "cannot reach redis+sentinel://<credentials>@10.0.0.1:26379,10.0.0.2,[::1]:26380/"
        "mail-primary?sentinel_password=<secret>&db=2")
    assert redis_url_secrets(SENTINEL_URL) == ["d@ta:pw", "s&ntinel-pw"]
    configure_logging()
    logging.getLogger("test").warning("redis said: wrong password d@ta:pw, url %s", SENTINEL_URL)
    line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert "s%26ntinel-pw" not in line["message"] and "d%40ta" not in line["message"]
