"""What a run counts against: pools, rate limits and budgets; and what a settled parent
lets through to the jobs chained after it."""
