"""The database floor: engines, sessions and transactions, the driver, the clock, error
translation, the schema."""
