"""What watches a run: its records (telemetry), memory, the model-only ceiling, the host (cores,
/dev/shm) and the checks before the first step (preflight)."""
