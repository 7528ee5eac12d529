"""The transition table (occurrences, jobs, limits) and the door every write goes through."""
