"""The database floor the statements stand on: engines, the driver, the clock, error
translation, the schema and its checks."""
