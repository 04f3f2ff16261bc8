"""Operations: the audit and send logs, metrics, and the checks `diagnose` runs."""
