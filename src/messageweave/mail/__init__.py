"""Mail: the mail source the pipeline and the chat use (`source`, with its `records` and
`errors`) and its watching side (`watch`, `passes`); the JMAP client that implements them
(`messageweave.mail.jmap`, `jmap_watch`), reconcile, push, the scheduler and the gap auditor."""
