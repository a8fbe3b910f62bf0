"""PyTorch weight files of transformers-style folders: model.safetensors (read with
numpy, no torch) or pytorch_model.bin (read with torch where it is installed)."""
import os

from mtl_framework.errors import UserError

SAFETENSORS = "model.safetensors"
TORCH_BIN = "pytorch_model.bin"


def read_tensors(directory, what="a transformers"):
    """{torch name: array} from model.safetensors (numpy, no torch) or pytorch_model.bin
    (torch.load, when torch is importable)."""
    path = os.path.join(directory, SAFETENSORS)
    if os.path.exists(path):
        from safetensors.numpy import load_file

        try:
            return load_file(path), path
        except Exception as error:  # safetensors raises its own types for corrupt files
            raise UserError(f"{path}: not a readable safetensors file ({error})") from None
    path = os.path.join(directory, TORCH_BIN)
    if not os.path.exists(path):
        raise UserError(f"{directory}: neither {SAFETENSORS} nor {TORCH_BIN}; {what} "
                        "folder has one of them")
    try:
        import torch
    except ImportError:
        raise UserError(f"{path}: reading a PyTorch pickle needs torch (pip install torch), "
                        f"or convert it once to {SAFETENSORS} where torch is installed") from None
    state = torch.load(path, map_location="cpu", weights_only=True)
    return {name: value.float().numpy() for name, value in state.items()}, path
