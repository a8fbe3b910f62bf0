"""Scores, NumPy only: the metrics a task spec names and the publishers' own scorers."""
