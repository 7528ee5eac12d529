"""The transaction every write runs in: the held connection, a caller's borrowed one, and
the event log each change appends to (its rows built by :mod:`kernel.statements.logged`)."""
