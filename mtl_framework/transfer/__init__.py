"""Trained again from an export: `mtl finetune` (finetune.py) and `mtl benchmark`'s suites of
fine-tunes with paired intervals (benchmark.py)."""
