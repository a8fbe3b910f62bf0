"""Stage 2, prepare: an experiment's vocab and feature caches (pipeline.py, cache.py), and
what reading a task's data gives (stats.py, show.py)."""
