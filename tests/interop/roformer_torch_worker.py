"""Runs PyTorch RoFormer in the torch venv (`make interop-torch`: .venv-torch, torch CPU,
JunnYu's roformer 0.4.3, transformers 4.50.3); started by interop/roformer_torch.py.
Imports nothing from mtl_framework (TensorFlow is not installed there).

    python roformer_torch_worker.py encode DIR INPUTS.npz OUT.npy [roformer|transformers]
        last_hidden_state of RoFormerModel.from_pretrained(DIR) (JunnYu's `roformer`, or
        mainline transformers' RoFormer v1) on INPUTS' token_ids/segment_ids with
        attention_mask = token_ids != 0
    python roformer_torch_worker.py save CONFIG.json DIR WEIGHTS.npz SEED safetensors|bin
        a randomly initialised RoFormerModel (safetensors) or RoFormerForMaskedLM (bin, as
        the hub's copies), written by save_pretrained; WEIGHTS.npz: its state_dict
    python roformer_torch_worker.py tokenize DIR TEXTS.json OUT.json
        BertTokenizer.from_pretrained(DIR) ids of each text (or [a, b] pair)
    python roformer_torch_worker.py batch JOBS.json
        each of JOBS (a list of the argument lists above) in turn, in one process
"""
import json
import sys


def model_class(library):
    if library == "roformer":
        from roformer import RoFormerModel
    else:
        from transformers import RoFormerModel
    return RoFormerModel


def encode(directory, inputs_path, out_path, library="roformer"):
    import numpy as np
    import torch

    model = model_class(library).from_pretrained(directory).eval()
    inputs = np.load(inputs_path)
    token_ids = torch.from_numpy(inputs["token_ids"].astype("int64"))
    segment_ids = torch.from_numpy(inputs["segment_ids"].astype("int64"))
    with torch.no_grad():
        hidden = model(input_ids=token_ids, token_type_ids=segment_ids,
                       attention_mask=(token_ids != 0).long()).last_hidden_state
    np.save(out_path, hidden.numpy())


def save(config_path, directory, weights_path, seed, serialization):
    import numpy as np
    import torch
    from roformer import RoFormerConfig, RoFormerForMaskedLM, RoFormerModel

    torch.manual_seed(int(seed))
    with open(config_path, encoding="utf-8") as f:
        config = RoFormerConfig(**json.load(f))
    model = (RoFormerModel if serialization == "safetensors" else RoFormerForMaskedLM)(config)
    model.save_pretrained(directory, safe_serialization=serialization == "safetensors")
    np.savez(weights_path, **{k: v.numpy() for k, v in model.state_dict().items()})


def tokenize(directory, texts_path, out_path):
    from transformers import BertTokenizer

    tokenizer = BertTokenizer.from_pretrained(directory)
    with open(texts_path, encoding="utf-8") as f:
        texts = json.load(f)
    ids = [tokenizer(*t)["input_ids"] if isinstance(t, list) else tokenizer(t)["input_ids"]
           for t in texts]
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(ids, f)


if __name__ == "__main__":
    from commands import run  # beside this script

    run({"encode": encode, "save": save, "tokenize": tokenize}, sys.argv[1:])
