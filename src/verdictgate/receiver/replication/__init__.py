"""Replication: what replicas sharing one PostgreSQL store add to a receiver.

The runs this replica owns, its heartbeat, takeovers of lapsed replicas' runs and catching up
with what the others wrote (`ownership`), timed by the one clock they compare, the store's
(`database_clock`).
"""
