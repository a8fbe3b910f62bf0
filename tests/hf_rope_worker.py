"""Hugging Face transformers' own rotary tables, for tests/test_rope_scaling.py.

Run by the torch venv's interpreter (.venv-torch: transformers 4.50.3):

    python hf_rope_worker.py CASES.json OUT.npz

CASES.json: [{"name", "type": default | linear | dynamic, "factor", "base", "dim",
"max_position", "length"}]. Per case OUT.npz holds `<name>/inv_freq` (after the forward,
so dynamic's update has run), `<name>/cos` and `<name>/sin` [length, dim] as
`LlamaRotaryEmbedding.forward` returns them for positions 0..length-1 (HF's layout:
the two halves of the head, not adjacent pairs).
"""
import json
import sys

import numpy as np
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding


def tables(case):
    scaling = None if case["type"] == "default" else {"rope_type": case["type"],
                                                       "factor": case["factor"]}
    config = LlamaConfig(hidden_size=case["dim"], num_attention_heads=1, head_dim=case["dim"],
                         rope_theta=case["base"], max_position_embeddings=case["max_position"],
                         rope_scaling=scaling)
    rotary = LlamaRotaryEmbedding(config)
    positions = torch.arange(case["length"])[None]
    x = torch.zeros(1, case["length"], case["dim"])
    with torch.no_grad():
        cos, sin = rotary(x, positions)
    return rotary.inv_freq.numpy(), cos[0].numpy(), sin[0].numpy()


def main(cases_path, out_path):
    with open(cases_path) as f:
        cases = json.load(f)
    out = {}
    for case in cases:
        inv_freq, cos, sin = tables(case)
        out[f"{case['name']}/inv_freq"] = inv_freq
        out[f"{case['name']}/cos"] = cos
        out[f"{case['name']}/sin"] = sin
    np.savez(out_path, **out)


if __name__ == "__main__":
    main(*sys.argv[1:])
