"""The container files promise what the README says (no container engine runs in CI to build
them; hadolint checks the Dockerfile's syntax and practices separately)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
COMPOSE = (ROOT / "compose.yaml").read_text()


def test_image_is_slim_multi_stage_non_root_under_tini() -> None:
    assert DOCKERFILE.count("FROM python:3.11-slim") == 2
    assert "\nUSER 10001\n" in DOCKERFILE
    assert 'ENTRYPOINT ["/usr/bin/tini", "--"]' in DOCKERFILE
    assert 'CMD ["messageweave", "serve"]' in DOCKERFILE


def test_image_listens_on_8080_and_checks_healthz() -> None:
    assert "ENV PORT=8080" in DOCKERFILE and "EXPOSE 8080" in DOCKERFILE
    healthcheck = DOCKERFILE[DOCKERFILE.index("HEALTHCHECK"):]
    assert "/healthz" in healthcheck.split("ENTRYPOINT")[0]


def test_compose_runs_two_instances_on_one_persistent_redis() -> None:
    assert "messageweave-1:" in COMPOSE and "messageweave-2:" in COMPOSE
    assert COMPOSE.count("<<: *messageweave") == 2
    assert "--appendonly yes" in COMPOSE
    assert "@redis:6379/0" in COMPOSE


def test_compose_redis_requires_a_password_from_env_kept_off_command_lines() -> None:
    """Finding 8 (issue #23): the Redis in `compose.yaml` had no password, so anything that
    reached its port (another container on the network, a published port) had every queue,
    log and the encrypted configuration. The password comes from `.env` (compose refuses to
    start without it), reaches redis-server on its standard input and redis-cli through
    `REDISCLI_AUTH` (a command line is readable by every local user in /proc), and the
    instances' `REDIS_URL` carries it."""
    redis = COMPOSE[COMPOSE.index("\n  redis:"):COMPOSE.index("\nvolumes:")]
    assert "REDIS_PASSWORD: ${REDIS_PASSWORD:?set REDIS_PASSWORD in .env}" in redis
    assert "exec redis-server - --appendonly yes" in redis  # the config on stdin, PID 1
    assert '\n        requirepass "$$REDIS_PASSWORD"\n' in redis
    assert "--requirepass" not in COMPOSE
    assert 'REDISCLI_AUTH=\\"$$REDIS_PASSWORD\\" redis-cli ping | grep -q PONG' in redis
    assert "REDIS_URL: redis://:${REDIS_PASSWORD:?set REDIS_PASSWORD in .env}@redis:6379/0" \
        in COMPOSE


def test_the_sentinel_variant_keeps_passwords_off_command_lines_and_names_its_primary() -> None:
    """Catches: a Sentinel variant whose REDIS_URL the service reads as a plain host (or puts
    in setup mode), or whose passwords sit on a command line (readable by every local user in
    /proc) instead of reaching the servers on stdin or in a private file."""
    import yaml

    from messageweave.settings import redis_url_well_formed

    variant = yaml.safe_load((ROOT / "compose.sentinel.yaml").read_text())
    services = variant["services"]
    url = services["messageweave-1"]["environment"]["REDIS_URL"]
    assert services["messageweave-2"]["environment"]["REDIS_URL"] == url
    filled = url.replace("${REDIS_PASSWORD:?set REDIS_PASSWORD in .env}", "ab12").replace(
        "${SENTINEL_PASSWORD:?set SENTINEL_PASSWORD in .env}", "cd34")
    assert filled == ("redis+sentinel://:ab12@sentinel-1:26379,sentinel-2:26379,"
                      "sentinel-3:26379/mw-primary?sentinel_password=cd34")
    assert redis_url_well_formed(filled)
    sentinels = [services[f"sentinel-{i}"] for i in (1, 2, 3)]
    for name, service in services.items():
        if name.startswith("messageweave"):
            continue
        script = "\n".join(service["command"])
        for line in script.splitlines():
            if "PASSWORD" in line:  # only inside the heredoc, as a variable
                assert line.strip().startswith(("requirepass", "masterauth", "sentinel ")), line
    for sentinel in sentinels:
        script = sentinel["command"][2]
        assert "sentinel monitor mw-primary redis 6379 2" in script
        assert "[ -f /data/sentinel.conf ] ||" in script  # what it learned survives a restart
