"""Export a run's trained backbone: our keras preset, bert4keras checkpoint, keras-hub preset."""
import json
import os
import shutil

import numpy as np

from mtl_framework.backbone import RoFormerV2Backbone

FORMATS = ("keras", "bert4keras", "keras-hub")


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
    return backbone, state


def model_card(run_dir, state):
    tasks = sorted(state["mixture"]["streams"])
    return (f"# RoFormerV2 backbone from mtl_framework\n\nRun: `{os.path.abspath(run_dir)}`, "
            f"step {state['step']}.\n\nTrained by supervised multi-task pretraining on: "
            f"{', '.join(tasks)}.\n\nLoad with `mtl_framework.RoFormerV2Backbone.from_preset(DIR)`.\n")


def export(run_dir, fmt, output):
    if fmt not in FORMATS:
        raise ValueError(f"--format {fmt!r}: choose one of {FORMATS}")
    backbone, state = load_run_backbone(run_dir)
    vocab = os.path.join(run_dir, "vocab.txt")
    os.makedirs(output, exist_ok=True)
    if fmt == "keras":
        backbone.save_preset(output, vocab, extra={"run": {"step": state["step"]}})
        with open(os.path.join(output, "README.md"), "w", encoding="utf-8") as f:
            f.write(model_card(run_dir, state))
    elif fmt == "bert4keras":
        from mtl_framework.bert4keras_io import save_bert4keras

        save_bert4keras(backbone, output, vocab)
    else:
        from mtl_framework.interop.hub import to_keras_hub

        to_keras_hub(backbone).save_to_preset(output)
        shutil.copyfile(vocab, os.path.join(output, "vocab.txt"))
    return output
