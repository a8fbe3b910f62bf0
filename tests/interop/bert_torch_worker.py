"""Runs transformers' BertModel / AlbertModel and BertTokenizerFast in the torch venv
(`make interop-torch`: torch CPU, transformers 4.50.3); started by interop/roformer_torch.py's
`run_torch(..., worker=BERT_WORKER)`. Imports nothing from mtl_framework.

    python bert_torch_worker.py save bert|albert CONFIG.json DIR SEED [INPUTS.npz OUT.npy]
        a BertModel (AlbertForMaskedLM for albert: its `albert.` prefix) with random
        weights, every bias and LayerNorm moved off its initial 0 / 1, written by
        save_pretrained (model.safetensors); then, given INPUTS, `encode` of DIR
    python bert_torch_worker.py encode DIR INPUTS.npz OUT.npy
        last_hidden_state of AutoModel.from_pretrained(DIR) on INPUTS' token_ids /
        segment_ids with attention_mask = token_ids != 0
    python bert_torch_worker.py load DIR TEXTS.json OUT.npz
        an `mtl export --format transformers` folder as a user loads it: AutoTokenizer
        (texts padded), AutoModel (strict: no missing or unexpected weight), its
        last_hidden_state; and SentenceTransformer(DIR).encode(texts) where
        sentence-transformers is installed (OUT's "sentence" absent otherwise)
    python bert_torch_worker.py tokenize VOCAB TEXTS.json OUT.json
        {"lower": ids, "cased": ids}: BertTokenizerFast(VOCAB, do_lower_case=True / False)
        ids of each text (or [a, b] pair)
    python bert_torch_worker.py batch JOBS.json
        each of JOBS (a list of the argument lists above) in turn, in one process
"""
import json
import sys


def save(kind, config_path, directory, seed, inputs_path=None, out_path=None):
    import torch
    import transformers

    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    torch.manual_seed(int(seed))
    if kind == "bert":
        model = transformers.BertModel(transformers.BertConfig(**config), add_pooling_layer=False)
    else:
        model = transformers.AlbertForMaskedLM(transformers.AlbertConfig(**config))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.dim() == 1:  # biases and LayerNorm: off 0 and 1
                parameter.add_(0.1 * torch.randn_like(parameter))
    model.save_pretrained(directory, safe_serialization=True)
    if inputs_path:  # one process: torch is slow to import
        encode(directory, inputs_path, out_path)


def encode(directory, inputs_path, out_path):
    import numpy as np
    import torch
    from transformers import AutoModel

    inputs = np.load(inputs_path)
    ids = torch.tensor(inputs["token_ids"], dtype=torch.long)
    model = AutoModel.from_pretrained(directory).eval()
    with torch.no_grad():
        out = model(input_ids=ids, token_type_ids=torch.tensor(inputs["segment_ids"],
                                                               dtype=torch.long),
                    attention_mask=(ids != 0).long()).last_hidden_state
    np.save(out_path, out.numpy())


def load(directory, texts_path, out_path):
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    with open(texts_path, encoding="utf-8") as f:
        texts = json.load(f)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    model, info = AutoModel.from_pretrained(directory, output_loading_info=True)
    unloaded = [name for kind in ("missing_keys", "unexpected_keys", "mismatched_keys")
                for name in info[kind]]
    if unloaded:
        raise SystemExit(f"{directory}: weights not loaded as saved: {unloaded}")
    with torch.no_grad():
        hidden = model.eval()(**batch).last_hidden_state.numpy()
    out = {"token_ids": batch["input_ids"].numpy(), "segment_ids": batch["token_type_ids"].numpy(),
           "hidden": hidden, "tokenizer": np.array(type(tokenizer).__name__),
           "model": np.array(type(model).__name__)}
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        pass
    else:
        out["sentence"] = SentenceTransformer(directory, device="cpu").encode(texts)
    np.savez(out_path, **out)


def tokenize(vocab, texts_path, out_path):
    from transformers import BertTokenizerFast

    with open(texts_path, encoding="utf-8") as f:
        items = json.load(f)
    ids = {}
    for case in ("lower", "cased"):
        tokenizer = BertTokenizerFast(vocab_file=vocab, do_lower_case=case == "lower")
        ids[case] = [tokenizer(*item)["input_ids"] if isinstance(item, list) else
                     tokenizer(item)["input_ids"] for item in items]
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(ids, f)


if __name__ == "__main__":
    from commands import run  # beside this script

    run({"save": save, "encode": encode, "load": load, "tokenize": tokenize}, sys.argv[1:])
