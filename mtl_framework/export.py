"""Export a run's trained backbone: our keras preset, bert4keras checkpoint, keras-hub preset.

keras       config.json + model.weights.h5 + vocab.txt + README.md (model card), what
            `RoFormerV2Backbone.from_preset` loads; `with_heads` adds heads.json +
            heads.weights.npz (task heads for a continued run: experiment `backbone.init`).
bert4keras  bert_config.json + bert_model.ckpt.* + vocab.txt for
            `build_transformer_model(config, checkpoint, model="roformer_v2")`.
keras-hub   keras-hub's preset layout (config.json, model.weights.h5, metadata.json,
            tokenizer.json + assets/tokenizer/vocabulary.txt) for
            `keras_hub.models.RoformerV2Backbone.from_preset`.

bert4keras and keras-hub have no residual scale `a`: a run exported before its
warm-up ended (a < 1) has `a` folded into the attention and FFN output kernels,
which is exact because both blocks end in a bias-free linear map.
"""
import json
import os
import shutil

import numpy as np

from mtl_framework.backbone import RoFormerV2Backbone

FORMATS = ("keras", "bert4keras", "keras-hub")
HEADS_CONFIG = "heads.json"
HEADS_WEIGHTS = "heads.weights.npz"
EVALUATIONS = "evaluations.jsonl"


def checkpoint_dirs(run_dir):
    """The run's checkpoints/step-N folder names, oldest first."""
    root = os.path.join(run_dir, "checkpoints")
    if not os.path.isdir(root):
        return []
    return sorted((d for d in os.listdir(root) if d.startswith("step-")),
                  key=lambda d: int(d.split("-")[1]))


def latest_checkpoint(run_dir):
    steps = checkpoint_dirs(run_dir)
    if not steps:
        raise FileNotFoundError(f"{run_dir}: no checkpoints/step-* folder; is this a run directory "
                                "written by `mtl train`?")
    return os.path.join(run_dir, "checkpoints", steps[-1])


def load_run_backbone(run_dir):
    """(backbone, trainer state) from the run's latest checkpoint; the backbone's
    variables come first in the checkpoint's variable list."""
    path = latest_checkpoint(run_dir)
    with open(os.path.join(path, "trainer.json"), encoding="utf-8") as f:
        state = json.load(f)
    backbone = RoFormerV2Backbone(**state["backbone"])
    backbone.build()
    values = np.load(os.path.join(path, "state.npz"))
    for i, variable in enumerate(backbone.variables):
        variable.assign(values[f"v{i:05d}"])
    state["checkpoint"] = path
    return backbone, state


def run_heads(run_dir, state):
    """(heads metadata, {variable path: array}) of the task heads in the run's latest
    checkpoint: the variables after the backbone's, in the order trainer.json lists them."""
    path = state["checkpoint"]
    heads = state.get("heads")
    if heads is None:
        raise ValueError(f"{path}/trainer.json has no 'heads' entry (written by an older "
                         "mtl_framework): continue the run one step with `mtl train --resume` "
                         "to write a checkpoint that has it, or export without --with-heads")
    values = np.load(os.path.join(path, "state.npz"))
    index = {name: i for i, name in enumerate(state["variables"])}
    weights = {}
    for task, meta in heads.items():
        for name in meta["variables"]:
            if name not in index:
                raise ValueError(f"{path}/trainer.json: head {task!r} lists variable {name!r}, "
                                 "which is not among the checkpoint's variables")
            weights[name] = values[f"v{index[name]:05d}"]
    return heads, weights


def fold_residual_alpha(backbone):
    """Fold the residual scale `a` into the output kernels (in place) and set a = 1.
    norm(x + a*F(x)) with F ending in a bias-free kernel W equals norm(x + F_{aW}(x))."""
    alpha = float(backbone.residual_alpha.numpy())
    if alpha != 1.0:
        for layer in backbone.transformer_layers:
            for kernel in (layer.attention.output_kernel, layer.feed_forward.output_kernel):
                kernel.assign(kernel.numpy() * alpha)
        backbone.residual_alpha.assign(1.0)
    return alpha


def last_dev_evaluation(run_dir):
    """The last `split: dev` line of RUN_DIR/evaluations.jsonl, or None."""
    from mtl_framework.evaluation import read_evaluations

    dev = [line for line in read_evaluations(run_dir) if line.get("split") == "dev"]
    return dev[-1] if dev else None


def model_card(run_dir, state, heads=None):
    """README.md of a keras export: tasks, steps and the run's last dev scores."""
    tasks = list(state["mixture"]["streams"])
    config = state["backbone"]
    lines = [
        "# RoFormerV2 backbone from mtl_framework", "",
        f"Run: `{os.path.abspath(run_dir)}`, checkpoint `{os.path.basename(state['checkpoint'])}` "
        f"({state['step']} optimizer updates).", "",
        f"Backbone: {config['num_layers']} layers, hidden {config['hidden_size']}, "
        f"{config['num_heads']} heads, FFN {config['intermediate_size']}, "
        f"vocab {config['vocab_size']}.", "",
        f"Trained by supervised multi-task pretraining on {len(tasks)} tasks: "
        f"{', '.join(tasks)}.", "",
        "## Dev scores", "",
    ]
    evaluation = last_dev_evaluation(run_dir)
    if evaluation is None:
        lines.append(f"not evaluated (run `mtl evaluate {run_dir}`)")
    else:
        lines += [f"From `{EVALUATIONS}`, step {evaluation.get('step')}"
                  + (f", aggregate {evaluation['aggregate']:.4f}"
                     if isinstance(evaluation.get("aggregate"), (int, float)) else "") + ":", "",
                  "| task | metric | score | majority baseline | examples |", "|---|---|---|---|---|"]

        def number(value):
            return f"{value:.4f}" if isinstance(value, (int, float)) else "-"

        for task, result in evaluation.get("tasks", {}).items():
            lines.append(f"| {task} | {result.get('metric', '')} | {number(result.get('score'))} | "
                         f"{number(result.get('baseline'))} | {result.get('examples', '-')} |")
    lines += ["", "## Use", "", "```python",
              "from mtl_framework import RoFormerV2Backbone",
              "backbone = RoFormerV2Backbone.from_preset(DIR)  # vocab: DIR/vocab.txt",
              "```", "",
              "Fine-tune one task from it: `mtl finetune DIR TASK`, or an experiment with "
              "`backbone: {init: DIR}`."]
    if heads:
        lines += ["", f"Task heads included ({HEADS_WEIGHTS}): {', '.join(heads)}; an "
                      "experiment with `backbone: {init: DIR}` starts the heads of tasks with "
                      "the same name from them."]
    else:
        lines += ["", "Task heads are not included (export with `--with-heads` to keep them)."]
    return "\n".join(lines) + "\n"


def save_heads(directory, heads, weights):
    with open(os.path.join(directory, HEADS_CONFIG), "w", encoding="utf-8") as f:
        json.dump(heads, f, indent=2, ensure_ascii=False)
    np.savez(os.path.join(directory, HEADS_WEIGHTS), **weights)


def load_heads(directory):
    """(heads metadata, {variable path: array}) of a keras export, or (None, None)."""
    path = os.path.join(directory, HEADS_CONFIG)
    if not os.path.exists(path):
        return None, None
    with open(path, encoding="utf-8") as f:
        heads = json.load(f)
    with np.load(os.path.join(directory, HEADS_WEIGHTS)) as values:
        weights = {name: values[name] for name in values.files}
    return heads, weights


def save_keras_hub_tokenizer(directory, vocab_path):
    """tokenizer.json (a RoformerV2Tokenizer config: lower-cased, accents stripped, as
    ours) + assets/tokenizer/vocabulary.txt, written without instantiating it: its
    WordPiece needs tensorflow-text, which loading the backbone does not."""
    config = {
        "module": "keras_hub.src.models.roformer_v2.roformer_v2_tokenizer",
        "class_name": "RoformerV2Tokenizer",
        "config": {"name": "roformer_v2_tokenizer", "trainable": True,
                   "dtype": {"module": "keras", "class_name": "DTypePolicy",
                             "config": {"name": "int32"}, "registered_name": None},
                   "config_file": "tokenizer.json", "vocabulary": None, "sequence_length": None,
                   "lowercase": True, "strip_accents": True, "split": True,
                   "suffix_indicator": "##", "oov_token": "[UNK]", "special_tokens": None,
                   "special_tokens_in_strings": False},
        "registered_name": "keras_hub>RoformerV2Tokenizer",
    }
    with open(os.path.join(directory, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=4)
    assets = os.path.join(directory, "assets", "tokenizer")
    os.makedirs(assets, exist_ok=True)
    shutil.copyfile(vocab_path, os.path.join(assets, "vocabulary.txt"))


def export(run_dir, fmt, output, with_heads=False, log=print):
    if fmt not in FORMATS:
        raise ValueError(f"--format {fmt!r}: choose one of {FORMATS}")
    if with_heads and fmt != "keras":
        raise ValueError("--with-heads is for --format keras (our preset); bert4keras and "
                         "keras-hub exports hold the backbone only")
    backbone, state = load_run_backbone(run_dir)
    vocab = os.path.join(run_dir, "vocab.txt")
    os.makedirs(output, exist_ok=True)
    if fmt == "keras":
        heads = None
        if with_heads:
            heads, weights = run_heads(run_dir, state)
            save_heads(output, heads, weights)
        backbone.save_preset(output, vocab, extra={
            "run": {"step": state["step"], "tasks": list(state["mixture"]["streams"]),
                    "checkpoint": os.path.abspath(state["checkpoint"])},
            "heads": list(heads) if heads else []})
        with open(os.path.join(output, "README.md"), "w", encoding="utf-8") as f:
            f.write(model_card(run_dir, state, heads))
        return output
    alpha = fold_residual_alpha(backbone)
    if alpha != 1.0 and log:
        log(f"residual scale a = {alpha:.4g} (warm-up not finished): folded into the "
            "attention and FFN output kernels")
    if fmt == "bert4keras":
        from mtl_framework.bert4keras_io import save_bert4keras

        save_bert4keras(backbone, output, vocab)
    else:
        from mtl_framework.interop.hub import to_keras_hub

        to_keras_hub(backbone).save_to_preset(output)
        shutil.copyfile(vocab, os.path.join(output, "vocab.txt"))
        save_keras_hub_tokenizer(output, vocab)
    return output


# --- starting a run from a keras export (experiment `backbone: {init: DIR}`) -----------

# Experiment backbone keys that may differ from the export's config.json (not shapes).
INIT_OVERRIDES = ("dropout", "attention_dropout", "alpha_warmup_steps", "exact_padding")
SHAPE_KEYS = ("num_layers", "hidden_size", "num_heads", "intermediate_size", "head_size",
              "embedding_size", "segment_vocab_size")


def head_metadata(heads, types, backbone):
    """trainer.json's "heads": per task its type, num_labels, plain config and variable paths."""
    shared = {id(v) for v in backbone.variables}
    metadata = {}
    for task, head in heads.items():
        config = {}
        for key, value in head.get_config().items():
            if key in ("name", "trainable", "dtype", "num_labels"):
                continue
            try:
                json.dumps(value)
            except TypeError:
                continue
            config[key] = value
        metadata[task] = {"type": types[task], "family": head.family,
                          "num_labels": head.num_labels, "config": config,
                          "variables": [v.path for v in head.variables if id(v) not in shared]}
    return metadata


def init_backbone(directory, spec, vocab_size, source="experiment"):
    """The backbone of a keras export (config.json + model.weights.h5) for a new run.

    `spec`: the experiment's backbone mapping; dims in it must equal the export's;
    dropout/attention_dropout may differ; alpha_warmup_steps defaults to 0 (the
    export's residual scale is kept, not warmed up again)."""
    from mtl_framework.backbone import backbone_config

    config_path = os.path.join(directory, "config.json")
    if not os.path.exists(config_path):
        raise FileNotFoundError(f"{source}: backbone.init {directory!r} has no config.json: "
                                "give a folder written by `mtl export RUN_DIR --format keras`")
    with open(config_path, encoding="utf-8") as f:
        config = dict(json.load(f)["backbone"])
    if spec.get("checkpoint"):
        raise ValueError(f"{source}: backbone has both init and checkpoint: keep one")
    asked = {k: spec[k] for k in SHAPE_KEYS if spec.get(k) is not None}
    if spec.get("size"):
        asked = {**{k: v for k, v in backbone_config(spec["size"]).items() if k in
                    ("num_layers", "hidden_size", "num_heads")}, **asked}
    for key, value in asked.items():
        if config.get(key) != value:
            raise ValueError(f"{source}: backbone.{key} is {value} but {config_path} has "
                             f"{config.get(key)}: drop backbone.{key} (init takes the dims from "
                             "the export) or init from another export")
    if config["vocab_size"] != vocab_size:
        raise ValueError(f"{source}: the vocab has {vocab_size} tokens but {config_path} has "
                         f"vocab_size {config['vocab_size']}: use the export's vocab.txt "
                         "(drop backbone.vocab)")
    config.update({k: spec[k] for k in INIT_OVERRIDES if spec.get(k) is not None})
    config["alpha_warmup_steps"] = spec.get("alpha_warmup_steps") or 0
    backbone = RoFormerV2Backbone(**config)
    backbone.build()
    backbone.load_weights(os.path.join(directory, "model.weights.h5"))
    return backbone


def init_heads(directory, heads, types, backbone, log=print):
    """Assign the export's head weights to the run's heads of the same task name.

    A task absent from the export starts fresh (logged); a task present with another
    type, label count or variable shape is an error naming what differs."""
    saved, weights = load_heads(directory)
    if saved is None:
        return []
    source = os.path.join(directory, HEADS_CONFIG)
    ours = head_metadata(heads, types, backbone)
    loaded = []
    for task, meta in ours.items():
        if task not in saved:
            continue
        theirs = saved[task]
        for key in ("type", "num_labels"):
            if theirs.get(key) != meta[key]:
                raise ValueError(f"{source}: head {task!r} has {key} {theirs.get(key)!r}, this "
                                 f"experiment's {task!r} has {meta[key]!r}: export without "
                                 "--with-heads (or rename the task) to start it fresh")
        variables = [v for v in heads[task].variables if v.path in meta["variables"]]
        if len(variables) != len(theirs["variables"]):
            raise ValueError(f"{source}: head {task!r} has {len(theirs['variables'])} variables, "
                             f"this experiment's {len(variables)}: its head config differs "
                             f"({theirs.get('config')} vs {meta['config']})")
        for variable, name in zip(variables, theirs["variables"]):
            value = weights[name]
            if tuple(value.shape) != tuple(variable.shape):
                raise ValueError(f"{source}: head {task!r} variable {name} has shape "
                                 f"{tuple(value.shape)}, this experiment's {variable.path} "
                                 f"{tuple(variable.shape)}: its head config differs "
                                 f"({theirs.get('config')} vs {meta['config']})")
            variable.assign(value)
        loaded.append(task)
    if log:
        fresh = [t for t in heads if t not in loaded]
        log(f"heads from {directory}: {', '.join(loaded) or 'none'}"
            + (f"; new: {', '.join(fresh)}" if fresh else ""))
    return loaded
