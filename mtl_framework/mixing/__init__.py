"""The task mixture: which task each micro-batch comes from (mixture.py) and how each
task's gradient is scaled into the shared update (balancing.py)."""
