"""Integration tests of the JMAP client against a real Cyrus IMAP server."""
