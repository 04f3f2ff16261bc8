"""The in-process worker that drains `stalwart:jmap` and `stalwart:telegram`."""

from __future__ import annotations

from messageweave.api.services import Services


async def run_worker(svc: Services) -> None:
    """Consume both streams until cancelled (started by the app lifespan)."""
