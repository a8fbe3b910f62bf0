"""PyTorch weight files of transformers-style folders: model.safetensors, or its shards
(model.safetensors.index.json + the files its weight_map names: what save_pretrained
writes for a large model), read with numpy, no torch; or pytorch_model.bin (read with
torch where it is installed)."""
import json
import os

from mtl_framework.errors import UserError

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
TORCH_BIN = "pytorch_model.bin"
WEIGHT_FILES = (SAFETENSORS, SAFETENSORS_INDEX, TORCH_BIN)  # a folder has one of them


def has_weights(directory):
    return any(os.path.exists(os.path.join(directory, name)) for name in WEIGHT_FILES)


def read_safetensors(path):
    from safetensors.numpy import load_file

    try:
        return load_file(path)
    except Exception as error:  # safetensors raises its own types for corrupt files
        raise UserError(f"{path}: not a readable safetensors file ({error})") from None


def read_shards(index_path):
    """{name: array} of every tensor the index's weight_map names, each from its shard."""
    directory = os.path.dirname(index_path)
    try:
        with open(index_path, encoding="utf-8") as f:
            weight_map = json.load(f).get("weight_map")
    except (ValueError, AttributeError) as error:
        raise UserError(f"{index_path}: not a safetensors index ({error or 'not an object'})"
                        ) from None
    if not isinstance(weight_map, dict) or not weight_map or not all(
            isinstance(v, str) for v in weight_map.values()):
        raise UserError(f"{index_path}: no weight_map ({{tensor name: shard file}}): copy the "
                        "whole folder")
    tensors = {}
    for shard in sorted(set(weight_map.values())):
        path = os.path.join(directory, shard)
        if os.path.basename(shard) != shard:
            raise UserError(f"{index_path}: shard {shard!r} is not a file beside the index")
        if not os.path.isfile(path):
            raise UserError(f"{index_path}: its shard {shard} is missing: copy the whole folder")
        stored = read_safetensors(path)
        wanted = [name for name, file in weight_map.items() if file == shard]
        absent = [name for name in wanted if name not in stored]
        if absent:
            raise UserError(f"{path}: lacks {absent[0]}"
                            + (f" (and {len(absent) - 1} more)" if len(absent) > 1 else "")
                            + f", which {os.path.basename(index_path)} places there")
        tensors.update((name, stored[name]) for name in wanted)
    return tensors


def read_tensors(directory, what="a transformers"):
    """({torch name: array}, the file named in messages) from model.safetensors, its
    shards (numpy, no torch) or pytorch_model.bin (torch.load, when torch is importable)."""
    path = os.path.join(directory, SAFETENSORS)
    if os.path.exists(path):
        return read_safetensors(path), path
    index = os.path.join(directory, SAFETENSORS_INDEX)
    if os.path.exists(index):
        return read_shards(index), index
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
