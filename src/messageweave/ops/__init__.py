"""Operations: the audit and send logs, and metrics."""
