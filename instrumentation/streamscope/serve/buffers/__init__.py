"""Resume buffers for `relay(resume=...)`: `MemoryBuffer` (one worker) and `RedisBuffer` (a fleet)."""
