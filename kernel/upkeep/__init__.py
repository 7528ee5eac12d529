"""What keeps the kernel healthy: the watchdog, retention, history, Beats, notifications,
checkup, and what ``why`` reads: blockers, a canvas's story."""
