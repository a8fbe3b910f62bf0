"""A run's files on disk and what produced them: the run directory (layout, lock,
checkpoints, records), a trained model read back, provenance, and checks on where a
command will write."""
