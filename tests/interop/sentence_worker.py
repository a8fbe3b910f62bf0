"""Loads an `mtl export --format transformers` folder as a user does, in a torch venv
(`.venv-current`: sentence-transformers 6, transformers 5; `.venv-torch`: 3.4.1, 4.50.3);
started by tests/test_sentence_transformers.py. Imports nothing from mtl_framework.

    python sentence_worker.py encode DIR JOB.json OUT.npz

JOB: {"texts": [...], "pooling": "cls"|"mean", "normalize": bool, "prompts": {name: text},
"truncate_dims": [N, ...]}, the settings the test expects (not read from the folder: the
folder is what is checked). OUT holds, per prompt name ("" for none):
    st_NAME      SentenceTransformer(DIR).encode(texts, prompt_name=NAME or None)
    manual_NAME  AutoModel + AutoTokenizer on prompt + text, last_hidden_state pooled by
                 hand (JOB's pooling over attention_mask), L2-normalised when JOB says so
and, where sentence-transformers has them (5 and later), "encode_query" and
"encode_document" (model.encode_query / encode_document, no prompt named); per N of
truncate_dims "truncate_N": SentenceTransformer(DIR, truncate_dim=N).encode(texts); and
"prompts" (the model's prompts, JSON), "modules" (its modules' class names),
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
    if hasattr(model, "encode_query"):  # sentence-transformers 5 and later
        out["encode_query"] = model.encode_query(texts, batch_size=4)
        out["encode_document"] = model.encode_document(texts, batch_size=4)
    for dims in job.get("truncate_dims", []):
        out[f"truncate_{dims}"] = SentenceTransformer(directory, device="cpu",
                                                      truncate_dim=dims).encode(texts, batch_size=4)
    out["prompts"] = np.array(json.dumps(model.prompts, ensure_ascii=False))
    out["modules"] = np.array(json.dumps([type(m).__name__ for m in model]))
    out["similarity"] = np.array(str(model.similarity_fn_name))
    out["versions"] = np.array(json.dumps({
        "sentence_transformers": sentence_transformers.__version__,
        "transformers": transformers.__version__, "torch": torch.__version__}))
    np.savez(out_path, **out)


def make(directory, job_path, out_path):
    """A sentence-transformers folder as the hub ships one, written by sentence-transformers
    itself: a tiny BertModel (JOB's "config", seeded) and its tokenizer (JOB's "tokens",
    saved by transformers: in 5, tokenizer.json and no vocab.txt), then Transformer ->
    Pooling (JOB's "pooling") [-> Normalize], JOB's "prompts" and "max_seq_length",
    `model.save(DIR)`. OUT: per prompt name "st_NAME" (encode with prompt_name), and
    "encode_query" / "encode_document" of JOB's "texts", with "versions"."""
    import tempfile

    import numpy as np
    import sentence_transformers
    import tokenizers
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    with open(job_path, encoding="utf-8") as f:
        job = json.load(f)
    torch.manual_seed(job.get("seed", 0))
    with tempfile.TemporaryDirectory() as scratch:
        vocab = f"{scratch}/vocab.txt"
        with open(vocab, "w", encoding="utf-8") as f:
            f.writelines(token + "\n" for token in job["tokens"])
        wordpiece = tokenizers.BertWordPieceTokenizer(vocab, lowercase=True)
        tokenizer = transformers.PreTrainedTokenizerFast(
            tokenizer_object=wordpiece._tokenizer, unk_token="[UNK]", pad_token="[PAD]",
            cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")
        bert = transformers.BertModel(transformers.BertConfig(**job["config"]),
                                      add_pooling_layer=False).eval()
        bert.save_pretrained(f"{scratch}/bert")
        tokenizer.save_pretrained(f"{scratch}/bert")
        encoder = Transformer(f"{scratch}/bert", max_seq_length=job["max_seq_length"])
        modules = [encoder, Pooling(encoder.get_embedding_dimension(), job["pooling"])]
        if job["normalize"]:
            modules.append(Normalize())
        model = SentenceTransformer(modules=modules, prompts=job["prompts"], device="cpu")
        model.save(directory)
    texts = job["texts"]
    out = {f"st_{name}": model.encode(texts, prompt_name=name or None, batch_size=4)
           for name in ["", *job["prompts"]]}
    out["encode_query"] = model.encode_query(texts, batch_size=4)
    out["encode_document"] = model.encode_document(texts, batch_size=4)
    out["versions"] = np.array(json.dumps({
        "sentence_transformers": sentence_transformers.__version__,
        "transformers": transformers.__version__, "torch": torch.__version__}))
    np.savez(out_path, **out)


if __name__ == "__main__":
    from commands import run  # beside this script

    run({"encode": encode, "make": make}, sys.argv[1:])
