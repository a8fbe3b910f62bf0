"""The run directory: the one module that reads and writes a run's files.

RUN_DIR/
  (the folder itself is flock-ed by the one `mtl train` writing here; the OS drops
   the lock when that process dies, even by SIGKILL; no lock file is left)
  experiment.yaml      the resolved experiment (what ran)
  vocab.txt            the vocabulary the run used
  checkpoints/step-N/  state.npz: every state variable, keyed by its name (below);
                       trainer.json: format, step, mixture positions, skipped counts,
                       backbone config, head metadata, "variables" (the names in state order),
                       "best" (keep_best / patience state)
  checkpoints/best-step-N/  keep_best's checkpoint (same files), never rotated away
  metrics.jsonl        one line per update (trainer.RunLogger)
  evaluations.jsonl    one line per evaluation (evaluation.record)
  provenance.jsonl     one line per `mtl train` start or resume: its start step, time and
                       provenance.provenance() (our version, commit, TF/Keras/tokenizers)
  logs/                TensorBoard scalars

Variable names do not depend on what else a process built (Keras numbers auto-named
layers, optimizers and seed generators per process): `backbone/<path inside the
backbone>`, `backbone/seed_generator_<k>` (k in the backbone's layer order), a head's
variables under its task name (`tnews/dense/kernel`), `initial_loss/<task>`,
`micro_batches_seen`, `loss_scale/<task>`, `finite_in_a_row/<task>`, and
`optimizer/<variable name>/<slot>` (`optimizer/iteration` for the optimizer's own).

Format 1 checkpoints (trainer.json without "format") keyed their arrays by position,
`v00000`..., in the model's state order, with the Keras paths listed in "variables".
They are still read: a resume assigns them by position (after checking the count),
a backbone is the first variables in that order, heads are found by their paths.

Writes are atomic: a checkpoint is written into `checkpoints/.tmp-<hex>` and renamed;
a killed write leaves only such a folder, which the next `mtl train` removes.
"""
import errno
import fcntl
import json
import os
import re
import shutil
import sys
import time
import uuid
import zipfile
import zlib

import numpy as np
import yaml

from mtl_framework.errors import UserError

EXPERIMENT = "experiment.yaml"
VOCAB = "vocab.txt"
EVALUATIONS = "evaluations.jsonl"
PROVENANCE = "provenance.jsonl"
METRICS = "metrics.jsonl"
CHECKPOINTS = "checkpoints"
STATE = "state.npz"
TRAINER = "trainer.json"
FORMAT = 2
TEMPORARY = ".tmp-"
DAMAGED = "damaged-"  # prefix a resume gives a damaged checkpoint it moved aside
BEST = "best-"  # prefix of keep_best's checkpoint: checkpoints/best-step-N
_STEP = re.compile(r"step-(\d+)$")
_BEST = re.compile(r"best-step-(\d+)$")


class DamagedFile(UserError, ValueError):
    """A run file that cannot be read (path:line: reason)."""


class CheckpointError(Exception):
    """A checkpoint folder that cannot be read; str() is `path: reason`."""


# --- variable names ---------------------------------------------------------------------

def layer_variable_names(layer, prefix):
    """{name: variable} of a layer's variables, named under `prefix` from inside the
    layer: the layer's own (possibly process-numbered) name is replaced by `prefix`."""
    seeds = {}
    for sublayer in layer._flatten_layers():
        for generator in sublayer._seed_generators:
            seeds.setdefault(id(generator.state), f"{prefix}/seed_generator_{len(seeds)}")
    named = {}
    for variable in layer.variables:
        name = seeds.get(id(variable)) or f"{prefix}/{variable.path.split('/', 1)[-1]}"
        _add(named, name, variable)
    return named


def optimizer_variable_names(optimizer, named):
    """{name: variable} of the optimizer's variables: a slot (Keras names it
    `<the variable's path with _ for />_<slot>`) after the named variable it belongs to."""
    owners = {v.path.replace("/", "_"): name for name, v in named.items()
              if getattr(v, "path", None)}
    result = {}
    for variable in optimizer.variables:
        name = f"optimizer/{variable.name}"
        cut = variable.name.rfind("_")
        while cut > 0:  # the longest owner the name starts with, then _<slot>
            if variable.name[:cut] in owners:
                name = f"optimizer/{owners[variable.name[:cut]]}/{variable.name[cut + 1:]}"
                break
            cut = variable.name.rfind("_", 0, cut)
        _add(result, name, variable)
    return result


def _add(named, name, variable):
    if name in named:  # a bug of ours, not the user's: two variables, one name
        raise RuntimeError(f"two state variables would be saved as {name!r}")
    named[name] = variable


def head_metadata(heads, backbone):
    """trainer.json's "heads": per task its type (the head's family), num_labels, plain
    config and the names of its own variables (the tied MLM embedding is the backbone's)."""
    shared = {id(v) for v in backbone.variables}
    return {task: {"type": head.family, "family": head.family, "num_labels": head.num_labels,
                   "config": head_config(head),
                   "variables": [name for name, v in layer_variable_names(head, task).items()
                                 if id(v) not in shared]}
            for task, head in heads.items()}


def head_config(head):
    """A head's get_config() without the keys metadata holds apart, and without values
    JSON cannot hold (the tied embedding)."""
    config = {}
    for key, value in head.get_config().items():
        if key in ("name", "trainable", "dtype", "num_labels", "family"):  # own keys
            continue
        try:
            json.dumps(value)
        except TypeError:
            continue
        config[key] = value
    return config


# --- checkpoints ----------------------------------------------------------------------

def checkpoint_dirs(run_dir):
    """The run's checkpoints/step-N folder names, oldest first."""
    root = os.path.join(run_dir, CHECKPOINTS)
    if not os.path.isdir(root):
        return []
    found = [d for d in os.listdir(root) if _STEP.match(d)]
    return sorted(found, key=lambda d: int(_STEP.match(d).group(1)))


def checkpoint_step(name):
    return int(_STEP.match(os.path.basename(name)).group(1))


def newest_checkpoint_step(run_dir):
    """The step of the run's newest checkpoints/step-N folder (read or not), 0 without any."""
    names = checkpoint_dirs(run_dir)
    return checkpoint_step(names[-1]) if names else 0


def write_checkpoint(run_dir, step, arrays, trainer, keep):
    """checkpoints/step-N (state.npz of `arrays` + trainer.json), written atomically;
    then only the newest `keep` are kept. A failed write (disk full) is removed and
    reported as one line; the checkpoints before it are untouched."""
    final = _write_folder(run_dir, f"step-{step:08d}", step, arrays, trainer)
    root = os.path.join(run_dir, CHECKPOINTS)
    for old in checkpoint_dirs(run_dir)[:-keep]:
        shutil.rmtree(os.path.join(root, old), ignore_errors=True)
    return final


def write_best(run_dir, step, arrays, trainer):
    """checkpoints/best-step-N (keep_best's checkpoint, the same files), written
    atomically; the earlier best-step-* are removed only once it is in place, so a kill
    leaves at least one (best_checkpoint takes the newest)."""
    final = _write_folder(run_dir, f"{BEST}step-{step:08d}", step, arrays, trainer,
                          replace=True)
    for old in best_dirs(run_dir):
        if old != os.path.basename(final):
            shutil.rmtree(os.path.join(run_dir, CHECKPOINTS, old), ignore_errors=True)
    return final


def best_dirs(run_dir):
    """The run's checkpoints/best-step-N folder names, oldest first."""
    root = os.path.join(run_dir, CHECKPOINTS)
    found = [d for d in os.listdir(root) if _BEST.match(d)] if os.path.isdir(root) else []
    return sorted(found, key=lambda d: int(_BEST.match(d).group(1)))


def best_checkpoint(run_dir):
    """The path of keep_best's checkpoint (the newest best-step-N), or None."""
    found = best_dirs(run_dir)
    return os.path.join(run_dir, CHECKPOINTS, found[-1]) if found else None


def remove_best_after(run_dir, step, log=print):
    """Remove best-step-N folders with N > step: a resume from `step` evaluates those
    steps again and writes them anew (its restored best is from `step` or before)."""
    for name in best_dirs(run_dir):
        if int(_BEST.match(name).group(1)) > step:
            shutil.rmtree(os.path.join(run_dir, CHECKPOINTS, name), ignore_errors=True)
            if log:
                log(f"removed {name}: written after the checkpoint this run resumes from")


def _write_folder(run_dir, name, step, arrays, trainer, replace=False):
    root = os.path.join(run_dir, CHECKPOINTS)
    final = os.path.join(root, name)
    if os.path.exists(final):
        if not replace:
            return final
        shutil.rmtree(final)
    temporary = os.path.join(root, f"{TEMPORARY}{uuid.uuid4().hex}")
    try:
        os.makedirs(temporary)
        save_arrays(os.path.join(temporary, STATE), arrays)
        with open(os.path.join(temporary, TRAINER), "w", encoding="utf-8") as f:
            json.dump({"format": FORMAT, "step": step, **trainer, "variables": list(arrays)},
                      f, indent=1)
        os.replace(temporary, final)
    except BaseException as error:  # a Ctrl-C or SIGTERM mid-write too: no .tmp- folder left
        shutil.rmtree(temporary, ignore_errors=True)
        if not isinstance(error, OSError):
            raise
        earlier = checkpoint_dirs(run_dir)
        kept = (f"{os.path.join(root, earlier[-1])} is intact" if earlier
                else "no earlier checkpoint exists")
        reason = ("no space left on the device" if error.errno in (errno.ENOSPC, errno.EDQUOT)
                  else error.strerror or str(error))
        raise UserError(f"{final}: {reason} while writing the checkpoint; the partial write was "
                        f"removed and {kept}: free space, then `mtl train ... --resume`") from None
    return final


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


def warn(message):
    print(f"warning: {message}", file=sys.stderr, flush=True)


def _reason(error):
    return str(error) or type(error).__name__


def latest_checkpoint(run_dir, wanted=None, log=print):
    """The newest checkpoint that reads (a Checkpoint, with `damaged`: the newer ones
    that did not, each named in a warning), or None when the run has no checkpoint.
    Every checkpoint damaged: a one-line UserError."""
    damaged = []
    for name in reversed(checkpoint_dirs(run_dir)):
        path = os.path.join(run_dir, CHECKPOINTS, name)
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
                        f"{os.path.join(run_dir, CHECKPOINTS)} cannot be read either): no intact "
                        "checkpoint to start from; restore one, or train into a new --output")
    return None


def set_aside(paths, log=print):
    """Rename damaged checkpoints newer than the one a resume starts from to
    `damaged-step-N`, so the resumed run writes those steps again (kept for inspection)."""
    for path in paths:
        target = os.path.join(os.path.dirname(path), DAMAGED + os.path.basename(path))
        os.replace(path, target)
        if log:
            warn(f"moved the damaged checkpoint {path} aside to {target}")


def remove_leftovers(run_dir, log=print):
    """Remove what killed writes left: checkpoints/.tmp-* folders and
    experiment.yaml.tmp-* files (only the lock's holder calls this: no other process
    can be writing them). Returns their paths."""
    root = os.path.join(run_dir, CHECKPOINTS)
    leftovers = [os.path.join(root, d) for d in sorted(os.listdir(root))
                 if d.startswith(TEMPORARY)] if os.path.isdir(root) else []
    leftovers += [os.path.join(run_dir, f) for f in sorted(os.listdir(run_dir))
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


# --- one writer per run directory ----------------------------------------------------------

class RunLock:
    """An exclusive flock on the run directory itself, held until release() or the process
    ends (the OS drops it then, so a killed run leaves no stale lock). No lock file: there
    is nothing a user could delete to let a second writer in, and nothing left behind that
    looks stale (a `train.lock` of older versions is ignored). Taken before the first
    write; a second writer is refused with the holder's PID (from the kernel's lock table,
    /proc/locks) and writes nothing."""

    def __init__(self, run_dir):
        self.path, self.fd = run_dir, None
        try:
            self.fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as error:
            raise UserError(f"{run_dir}: cannot open the run directory to lock it "
                            f"({error.strerror}): train into another --output") from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            holder = lock_holder(self.fd)
            os.close(self.fd)
            self.fd = None
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise UserError(f"{run_dir}: cannot lock the run directory "
                                f"({error.strerror}): train into another --output") from None
            raise UserError(f"{run_dir}: another `mtl train` (pid {holder or 'unknown'}) is "
                            "writing this run directory; wait for it to end, or train into "
                            "another --output") from None

    def release(self):
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None

    __del__ = release


def lock_holder_of(run_dir):
    """The PID of a process holding the run directory's lock now, else None."""
    try:
        fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return lock_holder(fd) or "unknown"
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def lock_holder(fd):
    """The PID holding a flock on the open file `fd`, from /proc/locks (Linux), or None."""
    inode = str(os.fstat(fd).st_ino)
    try:
        with open("/proc/locks", encoding="ascii") as f:
            table = f.read().splitlines()
    except OSError:
        return None
    for line in table:  # "1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234 0 EOF"; waiters have "->"
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5].rsplit(":", 1)[-1] == inode:
            return int(fields[4])
    return None


# --- experiment.yaml and evaluations.jsonl ------------------------------------------------

def write_experiment(run_dir, raw):
    """experiment.yaml (the resolved experiment), replaced atomically."""
    path = os.path.join(run_dir, EXPERIMENT)
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


def experiment_file(run_dir):
    """RUN_DIR/experiment.yaml, or a UserError saying this is no run directory."""
    path = os.path.join(run_dir, EXPERIMENT)
    if not os.path.exists(path):
        raise UserError(f"{run_dir}: no experiment.yaml; is this a run directory written by "
                        "`mtl train`?")
    return path


def read_experiment(run_dir):
    """The run's resolved experiment (experiment.yaml, as `write_experiment` wrote it)."""
    with open(experiment_file(run_dir), encoding="utf-8") as f:
        return yaml.safe_load(f) or {}


def append_evaluation(run_dir, line):
    path = os.path.join(run_dir, EVALUATIONS)
    drop_cut_last_line(path)  # appended onto, a cut line would merge with this one
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line, ensure_ascii=False, default=float) + "\n")


def drop_cut_last_line(path):
    """Truncate a JSON-lines file after its last newline (a killed append's rest)."""
    try:
        with open(path, "rb+") as f:
            data = f.read()
            if data and not data.endswith(b"\n"):
                f.truncate(data.rfind(b"\n") + 1)
                warn(f"{path}: removed an unfinished last line (a killed write)")
    except FileNotFoundError:
        pass


def trim_records(path, step, log=print):
    """Cut a JSON-lines record file (metrics.jsonl, evaluations.jsonl) back to the lines
    of updates <= `step`, the step a run (re)starts from: the updates after it are trained
    again and write their lines again, so each step is in the file once. A last line
    without its newline (a killed append) is dropped rather than appended onto. Rewritten
    atomically, and only when something changes. Returns the number of lines dropped."""
    if not os.path.exists(path):
        return 0
    if not os.path.isfile(path):
        raise UserError(f"{path}: not a file (the run's record of each step is kept there): "
                        "move it away")
    with open(path, encoding="utf-8", errors="replace") as f:
        texts = f.readlines()
    kept, cut, later = [], 0, 0
    for number, text in enumerate(texts, 1):
        if not text.endswith("\n") and number == len(texts):
            cut = 1  # an unfinished append
            continue
        try:
            record = json.loads(text)
        except ValueError:
            kept.append(text)  # a damaged middle line is the user's to see (report names it)
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int) and \
                record["step"] > step:
            later += 1
            continue
        kept.append(text)
    if not (cut or later):
        return 0
    temporary = f"{path}{TEMPORARY}{uuid.uuid4().hex}"
    with open(temporary, "w", encoding="utf-8") as f:
        f.writelines(kept)
    os.replace(temporary, path)
    if log:
        log(f"{path}: " + ", ".join(
            ([f"{later} line(s) of updates after {step} removed (trained again)"] if later else [])
            + (["an unfinished last line (a killed write) removed"] if cut else [])))
    return cut + later
def other_settings(line):
    """Whether an evaluations.jsonl line was scored at another length or rotary scaling
    than the run trained with (`mtl evaluate --max-length/--rope-scaling` records them)."""
    return "max_length" in line or "rope_scaling" in line


def read_evaluations(run_dir, log=None):
    """Every line of RUN_DIR/evaluations.jsonl (empty when the run was never evaluated).
    A last line without its newline is an append a kill cut short: skipped (logged)."""
    path = os.path.join(run_dir, EVALUATIONS)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        texts = f.readlines()
    lines = []
    for number, text in enumerate(texts, 1):
        if not text.strip():
            continue
        try:
            lines.append(json.loads(text))
        except json.JSONDecodeError as error:
            if number == len(texts) and not text.endswith("\n"):
                if log:
                    log(f"warning: {path}:{number}: an unfinished last line (a killed write); "
                        "skipped")
                continue
            raise DamagedFile(f"{path}:{number}: not a JSON line ({error}); delete or fix "
                              "that line") from None
    return lines


# --- provenance.jsonl -------------------------------------------------------------------

def append_provenance(run_dir, step):
    """A line for a `mtl train` that starts (or resumes) at `step`: what code it runs."""
    from mtl_framework.saving.provenance import provenance

    line = {"step": step, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **provenance()}
    with open(os.path.join(run_dir, PROVENANCE), "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def read_provenance(run_dir):
    """The lines of RUN_DIR/provenance.jsonl ([] for a run older than it); a line a
    kill cut short (no newline, not JSON) is skipped: it recorded nothing else."""
    path = os.path.join(run_dir, PROVENANCE)
    if not os.path.exists(path):
        return []
    lines = []
    with open(path, encoding="utf-8") as f:
        for number, text in enumerate(f, 1):
            try:
                lines.append(json.loads(text))
            except json.JSONDecodeError as error:
                if text.endswith("\n"):
                    raise DamagedFile(f"{path}:{number}: not a JSON line ({error}); delete or "
                                      "fix that line") from None
    return lines
