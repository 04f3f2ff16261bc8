"""Talking to the owner through Telegram: sending, conversation, consent, replies."""
