"""A run's files on disk, and nothing built: `RunDir` (run_dir.py) owns a run
directory's layout, lock, checkpoints and records; checkpoint.py the files of one
checkpoint; lock.py the one-writer lock; records.py the JSON-lines records; provenance.py
what produced a run. Where a command may write, and writing there whole, is files.py."""
from mtl_framework.rundir.run_dir import RunDir

__all__ = ["RunDir"]
