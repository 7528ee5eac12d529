"""What a run counts against: pools and budgets."""
