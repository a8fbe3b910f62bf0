"""Run PyTorch RoFormer in the torch venv's own interpreter (see roformer_torch_worker.py).

torch, roformer 0.4.3 and transformers 4.50.3 live in `.venv-torch` (`make
interop-torch`), apart from the TensorFlow venv: roformer needs transformers <= 4.50.3
and torch is ~0.7 GB. `MTL_TORCH_PYTHON` points at another interpreter that has them.
"""
import os
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER = os.path.join(os.path.dirname(__file__), "roformer_torch_worker.py")
BERT_WORKER = os.path.join(os.path.dirname(__file__), "bert_torch_worker.py")  # BERT, ALBERT


def torch_python():
    return os.environ.get("MTL_TORCH_PYTHON") or os.path.join(REPO, ".venv-torch", "bin", "python")


def torch_unavailable_reason():
    """None when the torch interpreter imports torch, roformer and transformers; else why not."""
    python = torch_python()
    if not os.path.exists(python):
        return f"{python} not found (run `make interop-torch`)"
    result = subprocess.run([python, "-c", "import torch, roformer, transformers"],
                            capture_output=True, text=True, timeout=300)
    if result.returncode:
        return f"{python} cannot import torch/roformer/transformers: {result.stderr[-300:]}"
    return None


def run_torch(*args, timeout=600, worker=WORKER):
    """Run `worker` with the torch interpreter; raise with its stderr on failure."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TRANSFORMERS_OFFLINE="1",
               HF_HUB_OFFLINE="1", PYTHONPATH="")
    result = subprocess.run([torch_python(), worker, *map(str, args)], env=env,
                            capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"torch worker {args[0]} failed:\n{result.stderr[-4000:]}")
    return result.stderr


def torch_site_packages():
    """The torch venv's site-packages (to import torch beside TensorFlow, same Python)."""
    import glob

    found = glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch_python())),
                                   "lib", "python3*", "site-packages"))
    return found[0] if found else None
