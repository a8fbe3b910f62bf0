"""A checkpoint folder's files: state.npz (every state variable, keyed by its name) and
trainer.json (format, step, mixture positions, skipped counts, backbone config, head
metadata, "variables": the names in state order, "best": keep_best / patience state,
"record": the settings a resume must match, plan.Plan.record; absent before issue 51).

Format 1 checkpoints (trainer.json without "format") keyed their arrays by position,
`v00000`..., in the model's state order, with the Keras paths listed in "variables".
They are still read: a resume assigns them by position (after checking the count),
a backbone is the first variables in that order, heads are found by their paths.
"""
import json
import os
import zipfile
import zlib

import numpy as np

from mtl_framework.errors import UserError

STATE = "state.npz"
TRAINER = "trainer.json"
FORMAT = 2


class CheckpointError(Exception):
    """A checkpoint folder that cannot be read; str() is `path: reason`."""


def write_files(folder, step, arrays, trainer):
    """state.npz of `arrays` and trainer.json into `folder` (which exists)."""
    save_arrays(os.path.join(folder, STATE), arrays)
    with open(os.path.join(folder, TRAINER), "w", encoding="utf-8") as f:
        json.dump({"format": FORMAT, "step": step, **trainer, "variables": list(arrays)},
                  f, indent=1)


def read_trainer(folder):
    """A checkpoint folder's trainer.json as a mapping, or None when it cannot be read."""
    try:
        with open(os.path.join(folder, TRAINER), encoding="utf-8") as f:
            trainer = json.load(f)
    except (OSError, ValueError):
        return None
    return trainer if isinstance(trainer, dict) else None


def save_arrays(path, arrays):
    """state.npz: one array per name (names may hold '/', which zip members allow)."""
    with open(path, "wb") as f:
        np.savez(f, **arrays)
        f.flush()
        os.fsync(f.fileno())  # on disk before the folder is renamed into place


class Checkpoint:
    """One readable checkpoint: `trainer` (trainer.json), `names` (state order) and
    `arrays` ({name: array} of the variables read). Format-1 names are Keras paths."""

    def __init__(self, path, trainer, arrays):
        self.path, self.trainer, self.arrays = path, trainer, arrays
        self.step = trainer["step"]
        self.names = list(trainer["variables"])
        self.positional = trainer.get("format", 1) < 2

    def in_order(self, names):
        """{name: array} for the model's state `names` (its state order): by name, or
        for a format-1 checkpoint by position; None names what does not match."""
        if self.positional:
            if len(names) != len(self.names):
                return None, (f"the checkpoint has {len(self.names)} variables, "
                              f"the model {len(names)}")
            return {name: self.arrays[old] for name, old in zip(names, self.names)}, None
        wanted = set(names)
        missing = [n for n in names if n not in self.arrays]
        extra = [n for n in self.names if n not in wanted]
        if missing or extra:
            return None, (f"variables the model has but the checkpoint not: {missing[:3]}"
                          f"{'...' if len(missing) > 3 else ''}; the checkpoint has but the "
                          f"model not: {extra[:3]}{'...' if len(extra) > 3 else ''}")
        return {name: self.arrays[name] for name in names}, None

    def backbone_arrays(self, names):
        """{backbone variable name: array}: by name, or (format 1) the first variables."""
        if self.positional:
            return {name: self.arrays[old] for name, old in zip(names, self.names)}
        missing = [name for name in names if name not in self.arrays]
        if missing:
            raise UserError(f"{self.path}: the backbone's {missing[0]} is not in the checkpoint "
                            f"({len(missing)} missing): was it written by another backbone?")
        return {name: self.arrays[name] for name in names}


def read_checkpoint(path, wanted=None):
    """The Checkpoint in folder `path`, with the arrays `wanted(name)` selects (all by
    default; every one for format 1, whose names do not say whose a variable is) read
    in full now, so a damaged file fails here: CheckpointError."""
    trainer_path = os.path.join(path, TRAINER)
    try:
        with open(trainer_path, encoding="utf-8") as f:
            trainer = json.load(f)
        names = list(trainer["variables"])
        int(trainer["step"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"{trainer_path}: {_reason(error)}") from None
    positional = trainer.get("format", 1) < 2
    keys = [f"v{i:05d}" for i in range(len(names))] if positional else names
    state_path = os.path.join(path, STATE)
    try:
        with np.load(state_path, allow_pickle=False) as values:
            missing = sorted(set(keys) - set(values.files))
            if missing:
                raise CheckpointError(f"{state_path}: {len(missing)} of the {len(keys)} arrays "
                                      f"{TRAINER} lists are missing ({missing[0]}, ...)")
            arrays = {name: values[key] for name, key in zip(names, keys)
                      if wanted is None or positional or wanted(name)}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as error:
        raise CheckpointError(f"{state_path}: {_reason(error)}") from None
    return Checkpoint(path, trainer, arrays)


def _reason(error):
    return str(error) or type(error).__name__
