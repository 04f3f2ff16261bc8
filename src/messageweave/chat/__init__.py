"""Talking to the owner through Telegram: the Bot API client, intents, reply texts, consent."""
