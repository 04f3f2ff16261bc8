"""The delivery pipeline: Redis Streams in, Telegram messages out, durably."""
