"""Loads an `mtl export --format transformers` folder as a user does, in a torch venv
(`.venv-current`: sentence-transformers 6, transformers 5; `.venv-torch`: 3.4.1, 4.50.3);
started by tests/test_sentence_transformers.py. Imports nothing from mtl_framework.

    python sentence_worker.py encode DIR JOB.json OUT.npz

JOB: {"texts": [...], "pooling": "cls"|"mean", "normalize": bool, "prompts": {name: text}},
the settings the test expects (not read from the folder: the folder is what is checked).
OUT holds, per prompt name ("" for none):
    st_NAME      SentenceTransformer(DIR).encode(texts, prompt_name=NAME or None)
    manual_NAME  AutoModel + AutoTokenizer on prompt + text, last_hidden_state pooled by
                 hand (JOB's pooling over attention_mask), L2-normalised when JOB says so
and "prompts" (the model's prompts, JSON), "modules" (its modules' class names),
"similarity" (its similarity_fn_name), "versions" (JSON).
"""
import json
import sys


def encode(directory, job_path, out_path):
    import numpy as np
    import sentence_transformers
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    with open(job_path, encoding="utf-8") as f:
        job = json.load(f)
    texts = job["texts"]
    model = SentenceTransformer(directory, device="cpu")
    tokenizer = AutoTokenizer.from_pretrained(directory)
    encoder, info = AutoModel.from_pretrained(directory, output_loading_info=True)
    unloaded = [name for kind in ("missing_keys", "unexpected_keys", "mismatched_keys")
                for name in info.get(kind, [])]
    if unloaded:
        raise SystemExit(f"{directory}: weights not loaded as saved: {unloaded}")
    encoder.eval()
    out = {}
    for name in ["", *job["prompts"]]:
        out[f"st_{name}"] = model.encode(texts, prompt_name=name or None, batch_size=4)
        prefix = job["prompts"].get(name, "")
        batch = tokenizer([prefix + t for t in texts], padding=True, truncation=True,
                          return_tensors="pt")
        with torch.no_grad():
            hidden = encoder(**batch).last_hidden_state
        if job["pooling"] == "cls":
            pooled = hidden[:, 0]
        else:
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1)
        if job["normalize"]:
            pooled = torch.nn.functional.normalize(pooled, dim=-1)
        out[f"manual_{name}"] = pooled.numpy()
    out["prompts"] = np.array(json.dumps(model.prompts, ensure_ascii=False))
    out["modules"] = np.array(json.dumps([type(m).__name__ for m in model]))
    out["similarity"] = np.array(str(model.similarity_fn_name))
    out["versions"] = np.array(json.dumps({
        "sentence_transformers": sentence_transformers.__version__,
        "transformers": transformers.__version__, "torch": torch.__version__}))
    np.savez(out_path, **out)


if __name__ == "__main__":
    from commands import run  # beside this script

    run({"encode": encode}, sys.argv[1:])
