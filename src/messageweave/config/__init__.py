"""Business configuration: the wire model, its encryption at rest, and its live service."""
