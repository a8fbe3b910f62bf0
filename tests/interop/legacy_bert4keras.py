"""Run bert4keras in a subprocess with legacy tf-keras (see bert4keras_worker.py)."""
import importlib.util
import os
import subprocess
import sys

WORKER = os.path.join(os.path.dirname(__file__), "bert4keras_worker.py")


def bert4keras_available():
    """True when bert4keras 0.11.5 and tf-keras are importable (checked without importing)."""
    return all(importlib.util.find_spec(m) is not None for m in ("bert4keras", "tf_keras"))


def run_bert4keras(*args, timeout=600):
    """Run the worker with TF_KERAS=1 TF_USE_LEGACY_KERAS=1; raise with its stderr on failure."""
    env = dict(os.environ, TF_KERAS="1", TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2",
               CUDA_VISIBLE_DEVICES="")
    result = subprocess.run([sys.executable, WORKER, *map(str, args)], env=env,
                            capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"bert4keras worker {args[0]} failed:\n{result.stderr[-4000:]}")
    return result.stdout
