"""MessageWeave: a self-hosted mail assistant (JMAP mailbox → Telegram bot)."""

import sys

# `import httpx` loads httpx's own command line (`httpx._main`, with rich and pygments) whenever
# rich, click and pygments are installed, as Typer installs them; httpx falls back to a stub
# when that import fails. None in sys.modules makes it fail (the import system's documented
# "import blocked" entry). Nothing of ours runs httpx's command line, and the idle serving
# process held 3.3 MB for it (issue #26: 75.6 → 72.3 MB measured).
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
