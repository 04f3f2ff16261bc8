"""Mail: the JMAP client (`messageweave.mail.jmap`), reconcile, push, the scheduler and the gap
auditor."""
