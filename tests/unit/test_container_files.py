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
    assert '"--appendonly", "yes"' in COMPOSE
    assert "REDIS_URL: redis://redis:6379/0" in COMPOSE
