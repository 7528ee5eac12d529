"""An occurrence's life: firing, claiming, running, leases, pausing and controls, verdicts,
chains."""
