"""What parsing and validating a business configuration raise (reference §5)."""


class WireError(ValueError):
    """The JSON is not a business configuration object (unknown field, wrong type, missing)."""


class ConfigInvalid(ValueError):
    """The configuration is well-formed but breaks a rule; the message is user-facing."""
