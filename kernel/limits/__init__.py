"""What a run counts against: pools, rate limits and budgets."""
