"""Jobs: definitions, enqueueing and a run's replacement, sources, retirement, fan-in,
backfill, cancellation, health."""
