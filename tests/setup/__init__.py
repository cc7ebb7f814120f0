"""The set-up a user meets: declared requirements, the bench scripts, and the newcomer check (make test-newcomer)."""
