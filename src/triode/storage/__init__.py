"""The technology under the stores: one backend per `--store` URL scheme (memory.py,
redis.py, sqlite*.py) behind one contract (backend.py), and the typed records the stores
keep (records.py). No tasks here: actors/ owns the state and calls these, in worker threads
when they block."""
