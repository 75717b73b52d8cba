"""A run's state over time: when it saves and stops (lifecycle), the checkpoint files and their format
(checkpoint), which one a run continues from (resume) and putting it back into the run (restore)."""
