"""HTTP handlers: thin — parse, authorize, call a service, answer."""
