"""The transition table (occurrences, jobs, limits, chords) and the door all writes go through."""
