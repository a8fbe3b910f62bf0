"""Stage 5, the loop: `mtl train`'s Run (run.py) under model.fit, and its callbacks."""
