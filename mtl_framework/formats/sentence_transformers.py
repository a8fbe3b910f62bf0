"""A sentence embedding as sentence-transformers keeps it beside a transformers folder, and
as a run trained it: the one place both are read (embedding/encode.py, `mtl encode`) and
written (`mtl export --format transformers`, architectures/bert/transformers.py).

    modules.json                       Transformer -> Pooling [-> Normalize]
    sentence_bert_config.json          max_seq_length: the length the run trained at
    1_Pooling/config.json              cls or mean (over the real tokens, prompt included)
    config_sentence_transformers.json  prompts {"query", "document"}: the task's prefixes
                                       (sentence-transformers 6's names: encode_query,
                                       encode_document); similarity cosine

A folder as the hub ships it is read the same way: modules.json names each module's
folder (the Transformer at the root, or in 0_Transformer/ as sentence-transformers 1 and
2 saved it), a prompt named `passage` (what exports before sentence-transformers 6
wrote) stands for `document`.

A run's settings are what its contrastive tasks trained: their heads record pooling,
normalize, query_prefix, passage_prefix and matryoshka_dims (ContrastiveHead's config,
trainer.json); every export records them too (provenance.json "embedding"). The value and
its defaults are sentence_encoder/settings.py's EmbeddingSettings; this module reads and writes
its files. Imports nothing of TensorFlow, Keras or torch.
"""
import json
import os

from mtl_framework.errors import UserError
from mtl_framework.formats.json_file import PROVENANCE_FILE, read_json
from mtl_framework.sentence_encoder.settings import SIDES, EmbeddingSettings

POOLING_DIR = "1_Pooling"
NORMALIZE_DIR = "2_Normalize"  # named in modules.json; sentence-transformers reads nothing in it
MODULES = "modules.json"
ST_CONFIG = "config_sentence_transformers.json"
BERT_CONFIG = "sentence_bert_config.json"
# each side's prompt name in sentence-transformers 6 (encode_query / encode_document use
# these), and the names older folders gave it (read, never written)
PROMPT_NAMES = {"query": "query", "passage": "document"}
OLD_PROMPT_NAMES = {"passage": ("passage",)}
# The oldest releases the folder is tested with (docs/export.md): sentence-transformers
# warns when a folder names a newer one than it is, so these and not today's.
TESTED_WITH = {"sentence_transformers": "3.4.1", "transformers": "4.50.3", "pytorch": "2.13.0"}


def recorded_embedding(directory):
    """(provenance.json's "embedding" record, that file) of an export of ours; (None, None)
    for a folder without one (an export older than the record, a release)."""
    path = os.path.join(directory, PROVENANCE_FILE)
    if not os.path.isfile(path):
        return None, None
    saved = read_json(path)
    embedding = saved.get("embedding") if isinstance(saved, dict) else None
    if embedding is None:
        return None, None
    if not isinstance(embedding, dict) or not all(isinstance(c, dict) for c in embedding.values()):
        raise UserError(f"{path}: \"embedding\" is not an object of {{task: settings}}: "
                        "export the run again")
    return embedding, path


def export_settings(head_metadata, source, task=None, flag="--embedding-task"):
    """The embedding a folder declares, from its run's heads (EmbeddingSettings.from_heads),
    with one set of prompts under sentence-transformers' names, {"query": ...,
    "document": ...} (the empty ones left out), and "tasks": whose settings they are; None
    without a contrastive task. A folder holds one embedding: tasks whose prefixes differ
    make a UserError."""
    settings = EmbeddingSettings.from_heads(head_metadata, source, task, flag)
    if settings is None:
        return None
    tasks = list(settings.prompts)
    sides = {tuple(p[side] for side in SIDES) for p in settings.prompts.values()}
    if len(sides) > 1:
        raise UserError(f"{source}: its contrastive tasks {', '.join(tasks)} prefix queries or "
                        f"passages differently: give {flag} NAME (the task whose prefixes to use)")
    prompts = {PROMPT_NAMES[side]: prefix for side, prefix in zip(SIDES, sides.pop()) if prefix}
    return {"pooling": settings.pooling, "normalize": settings.normalize,
            "prompts": prompts, "tasks": tasks, "matryoshka_dims": list(settings.matryoshka_dims)}


def modules(directory):
    """modules.json's entries ([{"type", "path", ...}]), or None without the file."""
    path = os.path.join(directory, MODULES)
    if not os.path.isfile(path):
        return None
    entries = read_json(path)
    if not isinstance(entries, list) or not all(
            isinstance(m, dict) and isinstance(m.get("type"), str)
            and isinstance(m.get("path", ""), str) for m in entries):
        raise UserError(f"{path}: not a list of {{\"type\", \"path\"}} objects: copy the "
                        "model's modules.json again")
    return entries


def module_path(directory, entries, kind):
    """The folder of the first module of class `kind` (Transformer, Pooling, Normalize) in
    modules.json's `entries`, or None when there is none."""
    for entry in entries or ():
        if entry["type"].rsplit(".", 1)[-1] == kind:
            relative = entry.get("path", "")
            if os.path.isabs(relative) or ".." in relative.replace("\\", "/").split("/"):
                raise UserError(f"{os.path.join(directory, MODULES)}: module path {relative!r} "
                                "is not a folder inside the model's folder")
            return os.path.join(directory, relative) if relative else directory
    return None


def transformer_folder(directory):
    """The folder holding the transformers model of a sentence-transformers folder (its
    Transformer module's path: the folder itself, or 0_Transformer/), else `directory`."""
    return module_path(directory, modules(directory), "Transformer") or directory


def folder_settings(directory, pooling=None):
    """The settings a sentence-transformers folder declares (its Pooling module's
    config.json, a Normalize module, config_sentence_transformers.json's prompts); None
    without a pooling config. `pooling`: the one asked for (--pooling) instead of the
    folder's, which then need not be one of ours."""
    entries = modules(directory)
    pooling_dir = module_path(directory, entries, "Pooling")
    if pooling_dir in (None, directory):  # no Pooling module, or one without a path
        pooling_dir = os.path.join(directory, POOLING_DIR)
    pooling_file = os.path.join(pooling_dir, "config.json")
    if not os.path.isfile(pooling_file):
        return None
    config = read_json(pooling_file)
    if not isinstance(config, dict):
        raise UserError(f"{pooling_file}: not a JSON object")
    modes = [pooling] if pooling else pooling_modes(config)
    if modes not in (["cls"], ["mean"]):
        spelled = [f"pooling_mode {json.dumps(config['pooling_mode'])}"] \
            if "pooling_mode" in config else [k for k in OLD_POOLING_KEYS if config.get(k)]
        raise UserError(f"{pooling_file}: pooling {', '.join(spelled) or 'none'}; mtl_framework "
                        "encodes with cls or mean pooling alone: give --pooling cls or mean")
    pooling = modes[0]
    if pooling == "mean" and config.get("include_prompt", True) is False:
        raise UserError(f"{pooling_file}: include_prompt false (the prompt's tokens left out "
                        "of the mean); mtl_framework pools every real token: give --pooling "
                        "cls, or set include_prompt true if the model was trained so")
    normalize = module_path(directory, entries, "Normalize") is not None
    return {"pooling": pooling, "normalize": normalize, "prompts": folder_prompts(directory)}


# sentence-transformers 3's keys of a Pooling config (what `write` writes) -> the mode
OLD_POOLING_KEYS = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean",
                    "pooling_mode_max_tokens": "max", "pooling_mode_mean_sqrt_len_tokens":
                    "mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens": "weightedmean",
                    "pooling_mode_lasttoken": "lasttoken"}


def pooling_modes(config):
    """The modes a Pooling config.json pools by (several are concatenated): sentence-
    transformers 6's "pooling_mode" (a name or a list of them), else 3's one flag per
    mode."""
    if "pooling_mode" in config:
        modes = config["pooling_mode"]
        return [modes] if isinstance(modes, str) else [str(m) for m in modes or ()]
    return [mode for key, mode in OLD_POOLING_KEYS.items() if config.get(key)]


def folder_prompts(directory):
    """{"": {"query", "passage"}} from config_sentence_transformers.json's prompts (a
    `document` prompt, else an older folder's `passage`), {} without any."""
    path = os.path.join(directory, ST_CONFIG)
    if not os.path.isfile(path):
        return {}
    config = read_json(path)
    saved = (config.get("prompts") if isinstance(config, dict) else None) or {}
    if not isinstance(saved, dict) or not all(isinstance(v, str) or v is None
                                              for v in saved.values()):
        raise UserError(f"{path}: prompts is not an object of {{name: text}}: e.g. "
                        "{\"query\": \"...\", \"document\": \"...\"}")
    sides = {}
    for side in SIDES:
        names = (PROMPT_NAMES[side], *OLD_PROMPT_NAMES.get(side, ()))
        sides[side] = next((saved[name] for name in names if saved.get(name)), "")
    if not any(sides.values()):
        return {}
    return {"": sides}  # one set of sides, as a run's single task would give


# a tokenizer's model_max_length past this is transformers' "no limit" (int(1e30))
NO_LIMIT = 10 ** 9


def folder_length(directory):
    """The length a sentence-transformers folder cuts texts to, or None: the Transformer
    module's sentence_bert_config.json max_seq_length (sentence-transformers 3 to 5), else
    (a folder with modules.json) its tokenizer_config.json model_max_length, where
    sentence-transformers 6 keeps it."""
    folder = transformer_folder(directory)
    for name, key in ((BERT_CONFIG, "max_seq_length"), ("tokenizer_config.json",
                                                        "model_max_length")):
        path = os.path.join(folder, name)
        if key == "model_max_length" and modules(directory) is None:
            break  # a plain transformers folder's tokenizer limit is not a trained length
        if os.path.isfile(path):
            config = read_json(path)
            length = config.get(key) if isinstance(config, dict) else None
            if isinstance(length, int) and not isinstance(length, bool) and \
                    0 < length < NO_LIMIT:
                return length
    return None


def write(directory, hidden_size, max_length, settings=None):
    """The sentence-transformers files of a transformers folder: `settings` (export_settings)
    or, for a run that trained no embedding, EmbeddingSettings' PLAIN one (sentence-
    transformers' default for a plain encoder)."""
    settings = settings or EmbeddingSettings().to_json()
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
