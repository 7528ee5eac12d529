"""The transition table (occurrences, jobs, limits, chords) and the door all writes go
through, with its lane for a plain run's claim and success."""
