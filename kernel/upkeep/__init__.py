"""What keeps the kernel healthy: the watchdog, retention, history, Beats, notifications,
checkup."""
