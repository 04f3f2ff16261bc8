"""Built-in scheduling of reconcile passes (one instance at a time, under a Redis lock)."""

from __future__ import annotations

from messageweave.api.services import Services


async def run_scheduler(svc: Services) -> None:
    """Run periodic reconcile passes until cancelled (started by the app lifespan)."""
