"""The benchmarks (docs/benchmarks.md). Each script runs as a module from the repository
root, e.g. `.venv/bin/python -m bench.backbone --quick`, and imports its siblings as
`bench.<module>`; results go to bench/results/."""
import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def child_env(**overrides):
    """os.environ for a child Python process that runs `-m bench.<module>` or should import
    this checkout's packages: the repository first on its PYTHONPATH, then `overrides`."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, **overrides}
