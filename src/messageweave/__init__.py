"""MessageWeave: a self-hosted mail assistant (JMAP mailbox → Telegram bot)."""
