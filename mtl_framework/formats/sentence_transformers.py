"""A sentence embedding as sentence-transformers keeps it beside a transformers folder, and
as a run trained it: the one place both are read (evaluation/encode.py, `mtl encode`) and
written (`mtl export --format transformers`, architectures/bert/transformers.py).

    modules.json                       Transformer -> Pooling [-> Normalize]
    sentence_bert_config.json          max_seq_length: the length the run trained at
    1_Pooling/config.json              cls or mean (over the real tokens, prompt included)
    config_sentence_transformers.json  prompts {"query", "passage"}: the task's prefixes;
                                       similarity cosine

A run's settings are what its contrastive tasks trained: their heads record pooling,
normalize, query_prefix and passage_prefix (ContrastiveHead's config, trainer.json).
Imports nothing of TensorFlow, Keras or torch.
"""
import json
import os

from data_adapters.task_types import CONTRASTIVE
from mtl_framework.errors import UserError

POOLING_DIR = "1_Pooling"
NORMALIZE_DIR = "2_Normalize"  # named in modules.json; sentence-transformers reads nothing in it
MODULES = "modules.json"
ST_CONFIG = "config_sentence_transformers.json"
BERT_CONFIG = "sentence_bert_config.json"
SIDES = ("query", "passage")  # the prompt names: encode(texts, prompt_name="query")
# The oldest releases the folder is tested with (docs/export.md): sentence-transformers
# warns when a folder names a newer one than it is, so these and not today's.
TESTED_WITH = {"sentence_transformers": "3.4.1", "transformers": "4.50.3", "pytorch": "2.13.0"}


def trained_settings(head_metadata, source, task=None, flag="--task"):
    """{"pooling", "normalize", "prompts": {task: {"query", "passage"}}} from the heads'
    metadata of a run (or an export with heads); None when no head is contrastive. Tasks
    that pooled or normalised differently make a UserError (give `flag` NAME)."""
    heads = {name: meta["config"] for name, meta in head_metadata.items()
             if meta.get("family", meta.get("type")) == CONTRASTIVE.name}
    if task is not None:
        if task not in heads:
            raise UserError(f"{source}: {flag} {task}: not a contrastive task of this run; "
                            f"its contrastive tasks: {', '.join(heads) or 'none'}")
        heads = {task: heads[task]}
    if not heads:
        return None
    kinds = {(c.get("pooling", "cls"), c.get("normalize", True)) for c in heads.values()}
    if len(kinds) > 1:
        raise UserError(f"{source}: its contrastive tasks {', '.join(heads)} pool or normalise "
                        f"differently: give {flag} NAME (the task whose settings to use)")
    pooling, normalize = kinds.pop()
    prompts = {name: {"query": c.get("query_prefix", ""), "passage": c.get("passage_prefix", "")}
               for name, c in heads.items()}
    return {"pooling": pooling, "normalize": normalize, "prompts": prompts}


def export_settings(head_metadata, source, task=None, flag="--embedding-task"):
    """trained_settings with one set of prompts, {"query": ..., "passage": ...} (the empty
    ones left out), and "tasks": whose settings they are; None without a contrastive task.
    A folder holds one embedding: tasks whose prefixes differ make a UserError."""
    settings = trained_settings(head_metadata, source, task, flag)
    if settings is None:
        return None
    tasks = list(settings["prompts"])
    sides = {tuple(p[side] for side in SIDES) for p in settings["prompts"].values()}
    if len(sides) > 1:
        raise UserError(f"{source}: its contrastive tasks {', '.join(tasks)} prefix queries or "
                        f"passages differently: give {flag} NAME (the task whose prefixes to use)")
    prompts = {side: prefix for side, prefix in zip(SIDES, sides.pop()) if prefix}
    return {"pooling": settings["pooling"], "normalize": settings["normalize"],
            "prompts": prompts, "tasks": tasks}


def folder_settings(directory):
    """The settings a sentence-transformers folder declares (1_Pooling/config.json,
    a Normalize module, config_sentence_transformers.json's prompts); None without them."""
    pooling_file = os.path.join(directory, POOLING_DIR, "config.json")
    if not os.path.isfile(pooling_file):
        return None
    with open(pooling_file, encoding="utf-8") as f:
        config = json.load(f)
    if config.get("pooling_mode_cls_token"):
        pooling = "cls"
    elif config.get("pooling_mode_mean_tokens"):
        pooling = "mean"
    else:
        modes = [k for k, v in config.items() if k.startswith("pooling_mode") and v]
        raise UserError(f"{pooling_file}: pooling {', '.join(modes) or 'none'}; mtl_framework "
                        "encodes with cls or mean pooling: give --pooling cls or mean")
    normalize = False
    modules_file = os.path.join(directory, MODULES)
    if os.path.isfile(modules_file):
        with open(modules_file, encoding="utf-8") as f:
            normalize = any(m.get("type", "").endswith("Normalize") for m in json.load(f))
    prompts = {}
    st_file = os.path.join(directory, ST_CONFIG)
    if os.path.isfile(st_file):
        with open(st_file, encoding="utf-8") as f:
            saved = json.load(f).get("prompts") or {}
        if saved:  # one set of sides, as a run's single task would give
            prompts = {"": {"query": saved.get("query", ""), "passage": saved.get("passage", "")}}
    return {"pooling": pooling, "normalize": normalize, "prompts": prompts}


def folder_length(directory):
    """sentence_bert_config.json's max_seq_length (the length the texts are cut to), or None."""
    path = os.path.join(directory, BERT_CONFIG)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        length = json.load(f).get("max_seq_length")
    return length if isinstance(length, int) and not isinstance(length, bool) and length > 0 \
        else None


def write(directory, hidden_size, max_length, settings=None):
    """The sentence-transformers files of a transformers folder: `settings` (export_settings)
    or, for a run that trained no embedding, mean pooling (sentence-transformers' default
    for a plain encoder), not normalised, no prompts."""
    settings = settings or {"pooling": "mean", "normalize": False, "prompts": {}}
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": POOLING_DIR, "type": "sentence_transformers.models.Pooling"}]
    if settings["normalize"]:
        modules.append({"idx": 2, "name": "2", "path": NORMALIZE_DIR,
                        "type": "sentence_transformers.models.Normalize"})
    write_json(os.path.join(directory, MODULES), modules)
    write_json(os.path.join(directory, BERT_CONFIG),
               {"max_seq_length": max_length, "do_lower_case": False})
    os.makedirs(os.path.join(directory, POOLING_DIR), exist_ok=True)
    write_json(os.path.join(directory, POOLING_DIR, "config.json"), {
        "word_embedding_dimension": hidden_size,
        "pooling_mode_cls_token": settings["pooling"] == "cls",
        "pooling_mode_mean_tokens": settings["pooling"] == "mean",
        "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False, "pooling_mode_lasttoken": False,
        "include_prompt": True})  # the prefix's tokens are pooled, as the run pooled them
    write_json(os.path.join(directory, ST_CONFIG), {
        "__version__": TESTED_WITH, "prompts": settings["prompts"], "default_prompt_name": None,
        "similarity_fn_name": "cosine"})


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, ensure_ascii=False)
        f.write("\n")
