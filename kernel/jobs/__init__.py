"""Jobs: definitions, enqueueing, sources, retirement, fan-in, backfill, cancellation, health."""
