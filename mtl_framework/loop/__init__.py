"""Stage 5, the loop: `mtl train`'s Run (run.py), its callbacks, and the commands that
train again from an export (finetune.py, benchmark.py)."""
