"""Mail access: the JMAP client (`messageweave.mail.jmap`)."""
