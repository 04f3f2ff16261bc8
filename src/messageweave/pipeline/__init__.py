"""The delivery pipeline: Redis Streams in, Telegram messages out, durably; what each entry
becomes (a notification, or the answer to the owner's message: search, summary)."""
