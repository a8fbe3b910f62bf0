"""The run directory as one object: `RunDir(path)` owns a run's layout, its lock, its
checkpoints and its records. Nothing else in the package composes a run's paths or
reads its files; the plan carries a RunDir, and precision, resume and evaluation take
what they need from it as values.

RUN_DIR/
  (the folder itself is flock-ed by the one `mtl train` writing here; the OS drops
   the lock when that process dies, even by SIGKILL; no lock file is left)
  experiment.yaml      the resolved experiment (what ran)
  vocab.txt            the vocabulary the run used
  checkpoints/step-N/  state.npz + trainer.json (checkpoint.py)
  checkpoints/best-step-N/  keep_best's checkpoint (same files), never rotated away
  metrics.jsonl        one line per update (loop/run.py's RunLogger)
  evaluations.jsonl    one line per evaluation (evaluation/dev.py's record)
  provenance.jsonl     one line per `mtl train` start or resume: its start step, time and
                       provenance.provenance() (our version, commit, TF/Keras/tokenizers)
  logs/                TensorBoard scalars

Writes are atomic: a checkpoint is written into `checkpoints/.tmp-<hex>` and renamed;
a killed write leaves only such a folder, which the next `mtl train` removes.
"""
import errno
import json
import os
import re
import shutil
import time
import uuid

import yaml

from mtl_framework.errors import UserError
from mtl_framework.rundir import records
from mtl_framework.rundir.checkpoint import CheckpointError, read_checkpoint, write_files
from mtl_framework.rundir.lock import RunLock, lock_holder_of
from mtl_framework.rundir.records import TEMPORARY, warn

EXPERIMENT = "experiment.yaml"
VOCAB = "vocab.txt"
EVALUATIONS = "evaluations.jsonl"
PROVENANCE = "provenance.jsonl"
METRICS = "metrics.jsonl"
CHECKPOINTS = "checkpoints"
LOGS = "logs"
DAMAGED = "damaged-"  # prefix a resume gives a damaged checkpoint it moved aside
BEST = "best-"  # prefix of keep_best's checkpoint: checkpoints/best-step-N
_STEP = re.compile(r"step-(\d+)$")
_BEST = re.compile(r"best-step-(\d+)$")


def checkpoint_step(name):
    """N of a checkpoints/step-N folder name or path."""
    return int(_STEP.match(os.path.basename(name)).group(1))


class RunDir:
    """A run directory, written or to be written by `mtl train`. `str(run)` and
    `os.fspath(run)` are its path, as given."""

    def __init__(self, path):
        self.path = os.fspath(path)

    def __fspath__(self):
        return self.path

    def __str__(self):
        return self.path

    def __repr__(self):
        return f"RunDir({self.path!r})"

    def __eq__(self, other):
        return isinstance(other, RunDir) and os.path.abspath(self.path) == \
            os.path.abspath(other.path)

    def __hash__(self):
        return hash(os.path.abspath(self.path))

    # --- layout ---------------------------------------------------------------------------

    def file(self, name):
        return os.path.join(self.path, name)

    experiment_path = property(lambda self: self.file(EXPERIMENT))
    vocab_path = property(lambda self: self.file(VOCAB))
    metrics_path = property(lambda self: self.file(METRICS))
    evaluations_path = property(lambda self: self.file(EVALUATIONS))
    checkpoints_path = property(lambda self: self.file(CHECKPOINTS))
    logs_path = property(lambda self: self.file(LOGS))

    def is_run(self):
        """Whether `mtl train` has written here (its experiment.yaml exists)."""
        return os.path.isfile(self.experiment_path)

    # --- experiment.yaml -------------------------------------------------------------------

    def write_experiment(self, raw):
        """experiment.yaml (the resolved experiment), replaced atomically."""
        path = self.experiment_path
        temporary = f"{path}{TEMPORARY}{uuid.uuid4().hex}"
        try:
            with open(temporary, "w", encoding="utf-8") as f:
                yaml.safe_dump(raw, f, allow_unicode=True, sort_keys=False)
            os.replace(temporary, path)
        except BaseException:
            if os.path.exists(temporary):
                os.remove(temporary)
            raise
        return path

    def experiment_file(self):
        """RUN_DIR/experiment.yaml, or a UserError saying this is no run directory."""
        if not os.path.exists(self.experiment_path):
            raise UserError(f"{self.path}: no experiment.yaml; is this a run directory written "
                            "by `mtl train`?")
        return self.experiment_path

    def read_experiment(self):
        """The run's resolved experiment (experiment.yaml, as `write_experiment` wrote it)."""
        with open(self.experiment_file(), encoding="utf-8") as f:
            return yaml.safe_load(f) or {}

    def stored_experiment(self):
        """The mapping experiment.yaml holds, or None where there is none or it does not
        read as one (the commands that need it say why in their own words)."""
        if not self.is_run():
            return None
        try:
            stored = self.read_experiment()
        except (OSError, ValueError, yaml.YAMLError):
            return None
        return stored if isinstance(stored, dict) else None

    # --- checkpoints -------------------------------------------------------------------------

    def checkpoint_names(self):
        """The run's checkpoints/step-N folder names, oldest first."""
        return self._names(_STEP)

    def best_names(self):
        """The run's checkpoints/best-step-N folder names, oldest first."""
        return self._names(_BEST)

    def _names(self, pattern):
        root = self.checkpoints_path
        found = [d for d in os.listdir(root) if pattern.match(d)] if os.path.isdir(root) else []
        return sorted(found, key=lambda d: int(pattern.match(d).group(1)))

    def checkpoint_path(self, name):
        return os.path.join(self.checkpoints_path, name)

    def newest_step(self):
        """The step of the run's newest checkpoints/step-N folder (read or not), 0 without any."""
        names = self.checkpoint_names()
        return checkpoint_step(names[-1]) if names else 0

    def steps_text(self):
        return ", ".join(str(checkpoint_step(d)) for d in self.checkpoint_names()) or "none"

    def write_checkpoint(self, step, arrays, trainer, keep):
        """checkpoints/step-N (state.npz of `arrays` + trainer.json), written atomically;
        then only the newest `keep` are kept. A failed write (disk full) is removed and
        reported as one line; the checkpoints before it are untouched."""
        final = self._write_folder(f"step-{step:08d}", step, arrays, trainer)
        for old in self.checkpoint_names()[:-keep]:
            shutil.rmtree(self.checkpoint_path(old), ignore_errors=True)
        return final

    def write_best(self, step, arrays, trainer):
        """checkpoints/best-step-N (keep_best's checkpoint, the same files), written
        atomically; the earlier best-step-* are removed only once it is in place, so a kill
        leaves at least one (best_path takes the newest)."""
        final = self._write_folder(f"{BEST}step-{step:08d}", step, arrays, trainer,
                                   replace=True)
        for old in self.best_names():
            if old != os.path.basename(final):
                shutil.rmtree(self.checkpoint_path(old), ignore_errors=True)
        return final

    def best_path(self):
        """The path of keep_best's checkpoint (the newest best-step-N), or None."""
        found = self.best_names()
        return self.checkpoint_path(found[-1]) if found else None

    def remove_best_after(self, step, log=print):
        """Remove best-step-N folders with N > step: a resume from `step` evaluates those
        steps again and writes them anew (its restored best is from `step` or before)."""
        for name in self.best_names():
            if int(_BEST.match(name).group(1)) > step:
                shutil.rmtree(self.checkpoint_path(name), ignore_errors=True)
                if log:
                    log(f"removed {name}: written after the checkpoint this run resumes from")

    def _write_folder(self, name, step, arrays, trainer, replace=False):
        root = self.checkpoints_path
        final = os.path.join(root, name)
        if os.path.exists(final):
            if not replace:
                return final
            shutil.rmtree(final)
        temporary = os.path.join(root, f"{TEMPORARY}{uuid.uuid4().hex}")
        try:
            os.makedirs(temporary)
            write_files(temporary, step, arrays, trainer)
            os.replace(temporary, final)
        except BaseException as error:  # a Ctrl-C or SIGTERM mid-write too: no .tmp- left
            shutil.rmtree(temporary, ignore_errors=True)
            if not isinstance(error, OSError):
                raise
            earlier = self.checkpoint_names()
            kept = (f"{self.checkpoint_path(earlier[-1])} is intact" if earlier
                    else "no earlier checkpoint exists")
            reason = ("no space left on the device" if error.errno in (errno.ENOSPC, errno.EDQUOT)
                      else error.strerror or str(error))
            raise UserError(f"{final}: {reason} while writing the checkpoint; the partial write "
                            f"was removed and {kept}: free space, then `mtl train ... --resume`"
                            ) from None
        return final

    def latest_checkpoint(self, wanted=None, log=print):
        """The newest checkpoint that reads (a Checkpoint, with `damaged`: the newer ones
        that did not, each named in a warning), or None when the run has no checkpoint.
        Every checkpoint damaged: a one-line UserError."""
        damaged = []
        for name in reversed(self.checkpoint_names()):
            path = self.checkpoint_path(name)
            try:
                checkpoint = read_checkpoint(path, wanted)
            except CheckpointError as error:
                damaged.append((path, str(error)))
                continue
            for bad, reason in damaged if log else []:  # warnings: on stderr, whatever `log` is
                warn(f"checkpoint {bad} cannot be read ({reason}); trying the one before it")
            checkpoint.damaged = [path for path, _ in damaged]
            return checkpoint
        if damaged:
            raise UserError(f"{damaged[-1][1]} (and every checkpoint after it in "
                            f"{self.checkpoints_path} cannot be read either): no intact "
                            "checkpoint to start from; restore one, or train into a new --output")
        return None

    def chosen_checkpoint(self, which, wanted=None):
        """keep_best's checkpoint ("best") or step N's, read whole (no fallback: the user
        named it)."""
        root, steps = self.checkpoints_path, self.steps_text()
        if str(which) == "best":
            path = self.best_path()
            if path is None:
                raise UserError(f"{self.path}: no best checkpoint ({root}/best-step-N): the run "
                                "has no `keep_best` in its experiment, or no evaluation yet; give "
                                f"--checkpoint latest or a step ({steps})")
        elif str(which).isdigit():
            path = os.path.join(root, f"step-{int(which):08d}")
            if not os.path.isdir(path):
                raise UserError(f"{self.path}: no checkpoint of step {int(which)}; its steps: "
                                f"{steps} (and best, with keep_best)")
        else:
            raise UserError(f"--checkpoint {which!r}: give best, latest or a step number")
        try:
            return read_checkpoint(path, wanted)
        except CheckpointError as error:
            raise UserError(f"{error}: this checkpoint cannot be read; export another "
                            "(--checkpoint latest or a step)") from None

    def trained_checkpoint(self, which=None, log=print):
        """The checkpoint a trained model is read from (backbone and head arrays, not the
        optimizer's): the newest readable one, falling back past damaged ones (`which` None
        or "latest"), keep_best's ("best") or step N's; a UserError when there is none."""
        wanted = lambda name: not name.startswith("optimizer/")  # noqa: E731
        if which not in (None, "latest"):
            return self.chosen_checkpoint(which, wanted)
        checkpoint = self.latest_checkpoint(wanted, log=log)
        if checkpoint is None:
            if not os.path.isdir(self.path):
                raise UserError(f"{self.path}: no such run directory")
            raise UserError(f"{self.path}: no checkpoints/step-* folder; is this a run directory "
                            "written by `mtl train`?")
        return checkpoint

    def remove_leftovers(self, log=print):
        """Remove what killed writes left: checkpoints/.tmp-* folders and
        experiment.yaml.tmp-* files (only the lock's holder calls this: no other process
        can be writing them). Returns their paths."""
        root = self.checkpoints_path
        leftovers = [os.path.join(root, d) for d in sorted(os.listdir(root))
                     if d.startswith(TEMPORARY)] if os.path.isdir(root) else []
        leftovers += [self.file(f) for f in sorted(os.listdir(self.path))
                      if any(f.startswith(name + TEMPORARY) for name in (EXPERIMENT, METRICS,
                                                                         EVALUATIONS, VOCAB))]
        for path in leftovers:
            if os.path.isdir(path):
                shutil.rmtree(path)
            else:
                os.remove(path)
        if leftovers and log:
            log(f"removed {len(leftovers)} unfinished write(s) a killed run left: "
                f"{', '.join(leftovers)}")
        return leftovers

    # --- the vocab --------------------------------------------------------------------------

    def checked_vocab(self, checkpoint, log=print):
        """RUN/vocab.txt, which must be the vocab the checkpoint records (its SHA-256,
        rundir/trained_on.py) and have one token per row of its embedding table: a cut or
        replaced vocab would tokenize into wrong ids, silently. A checkpoint older than
        the record is checked by size alone (one line says so)."""
        from mtl_framework.rundir.trained_on import check_vocab
        from mtl_framework.tokenizer import load_vocab

        path = self.vocab_path
        if not os.path.isfile(path):
            raise UserError(f"{path}: not found (the vocab the run trained with): copy it back "
                            "from where the run was written")
        size, rows = len(load_vocab(path)), checkpoint.trainer["backbone"]["vocab_size"]
        if size != rows:
            raise UserError(f"{path}: {size} tokens, but the checkpoint {checkpoint.path} has "
                            f"{rows} embedding rows: the vocab was cut or replaced; restore the "
                            "run's own vocab.txt")
        check_vocab(path, checkpoint.trainer.get("vocab"), f"{checkpoint.path}/trainer.json",
                    "the vocab was replaced; restore the run's own vocab.txt", log)
        return path

    # --- one writer --------------------------------------------------------------------------

    def lock(self):
        """The run's RunLock, taken now (a second writer is refused in one line)."""
        return RunLock(self.path)

    def lock_holder(self):
        """The PID of a process holding the run's lock now, else None."""
        return lock_holder_of(self.path)

    # --- records ------------------------------------------------------------------------------

    def open_metrics(self):
        """metrics.jsonl, open for appending one line per update."""
        return open(self.metrics_path, "a", encoding="utf-8")

    def trim_records(self, step, log=print):
        """metrics.jsonl and evaluations.jsonl cut back to the updates <= `step`, the step a
        run (re)starts from: each step is then in each file once."""
        for path in (self.metrics_path, self.evaluations_path):
            records.trim_records(path, step, log=log)

    def append_evaluation(self, line):
        """One line onto evaluations.jsonl, whole or not at all: a failed write (a full
        disk) is cut back to the file as it was and raised as a RecordNotWritten."""
        path = self.evaluations_path
        records.drop_cut_last_line(path)  # appended onto, a cut line would merge with this one
        records.append_whole(path, json.dumps(line, ensure_ascii=False, default=float) + "\n",
                             f"the evaluation of step {line.get('step')}")

    def read_evaluations(self, log=None):
        """Every line of evaluations.jsonl (empty when the run was never evaluated). A last
        line without its newline is an append a kill cut short: skipped (logged)."""
        return records.read_lines(self.evaluations_path, log)

    def append_provenance(self, step):
        """A line for a `mtl train` that starts (or resumes) at `step`: what code it runs."""
        from mtl_framework.rundir.provenance import provenance

        line = {"step": step, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **provenance()}
        with open(self.file(PROVENANCE), "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")

    def read_provenance(self):
        """The lines of provenance.jsonl ([] for a run older than it); a line a kill cut
        short (no newline, not JSON) is skipped: it recorded nothing else."""
        return records.read_lines(self.file(PROVENANCE))


def set_aside(paths, log=print):
    """Rename damaged checkpoints newer than the one a resume starts from to
    `damaged-step-N`, so the resumed run writes those steps again (kept for inspection)."""
    for path in paths:
        target = os.path.join(os.path.dirname(path), DAMAGED + os.path.basename(path))
        os.replace(path, target)
        if log:
            warn(f"moved the damaged checkpoint {path} aside to {target}")
