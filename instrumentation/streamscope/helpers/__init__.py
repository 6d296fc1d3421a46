"""What a caller uses on top of the instrumentation: `collect` (an honest result) and the retry line."""
