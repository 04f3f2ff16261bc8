"""AI summaries through an OpenAI-compatible API."""
