"""Feature cache and per-task batch streams.

    features = cached_features(task, "train", tokenizer, data_root)  # built once, then mmap'd
    stream = TaskStream(features, batch_size=32, seed=0)
    batch = stream.next_batch()          # dict of arrays, docs/batches.md
    state = stream.state()               # {"epoch": ..., "index": ...}, JSON-able
    stream.restore(state)                # the same batches again, bit for bit

Features are written once per content hash of everything that decides them:
the task's spec content (type, format, files, options, fields, labels), the
data files (path, size, mtime), the adapter (format name + source of its
modules), the tokenizer (vocab + settings fingerprint), max_length, the
featurizer settings and the featurizer version (features.py source). Any
change gives a new folder `<cache_dir>/<task>/<split>-<hash>/`; old folders
are left for you to delete. The folder is built under a temporary name and
renamed into place (os.replace), so a crash or a second process never leaves a
half-written cache that looks complete. Loading memory-maps the `.npy` files:
nothing is tokenized and memory holds only the rows a batch touches.

The cache folder: `cache_dir=` argument, else $MTL_CACHE_DIR, else `.cache/features`.
"""
import hashlib
import inspect
import json
import os
import shutil
import sys
import uuid
from pathlib import Path

import numpy as np

from mtl_framework import features as F

CACHE_ENV = "MTL_CACHE_DIR"
DEFAULT_CACHE_DIR = ".cache/features"
# Spec keys that decide the examples and their labels (description, rate... do not).
SPEC_KEYS = ("type", "format", "files", "options", "fields", "multi_label")


def cache_root(cache_dir=None):
    return Path(cache_dir or os.environ.get(CACHE_ENV) or DEFAULT_CACHE_DIR)


def adapter_version(format_name):
    """Hash of the source of the adapter's module and of every data_adapters
    module it uses (helpers such as reading.py), transitively."""
    import data_adapters

    adapter = data_adapters.get_adapter(format_name)
    seen, todo = set(), [sys.modules[adapter.__module__]]
    while todo:
        module = todo.pop()
        if module.__name__ in seen:
            continue
        seen.add(module.__name__)
        for value in vars(module).values():
            name = value.__name__ if inspect.ismodule(value) else getattr(value, "__module__", None)
            if isinstance(name, str) and name.split(".")[0] == "data_adapters" and name in sys.modules:
                todo.append(sys.modules[name])
    digest = hashlib.sha256()
    for name in sorted(seen):
        path = inspect.getsourcefile(sys.modules[name])
        if path:
            digest.update(name.encode() + b"\0" + Path(path).read_bytes())
    version = getattr(adapter, "version", None)
    return f"{format_name}:{version}:{digest.hexdigest()[:16]}"


def data_files(task, split, data_root):
    """[(path as listed, size, mtime_ns)] of a split's files: edited data means new features."""
    listed = task.files.get(split) if task.files else None
    if listed is None:
        raise KeyError(f"{task.spec_path}:{task.line}: task {task.name!r} has no {split!r} split; "
                       f"its files list {', '.join(task.files or {}) or 'none'}")
    out = []
    for relative in listed if isinstance(listed, list) else [listed]:
        path = Path(data_root) / relative
        if not path.exists():
            raise FileNotFoundError(
                f"{task.spec_path}:{task.line}: {split} file of task {task.name!r} not found: "
                f"{path.resolve()}; pass --data-root DIR (or set MTL_DATA_ROOT) to the folder "
                f"that holds {relative}")
        stat = path.stat()
        out.append((str(relative), stat.st_size, stat.st_mtime_ns))
    return out


def cache_key(task, split, featurizer, data_root):
    """(hex digest, the inputs it hashes) for one task split and featurizer."""
    inputs = {
        "task": task.name, "split": split,
        "spec": {key: getattr(task, key, None) for key in SPEC_KEYS},
        "data": data_files(task, split, data_root),
        "adapter": adapter_version(task.format),
        "tokenizer": featurizer.tokenizer.fingerprint(),
        "featurizer": featurizer.config(),
        "features_version": F.source_version(),
    }
    text = json.dumps(inputs, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest(), inputs


def cache_path(task, split, digest, cache_dir=None):
    return cache_root(cache_dir) / task.name / f"{split}-{digest[:16]}"


def cached_features(task, split, tokenizer, data_root, cache_dir=None, max_length=None,
                    family=None, log=None, **settings):
    """Features of one task split: loaded (memory-mapped) when the cache has
    them, else read + featurized once and written. `log(message)` hears which."""
    featurizer = F.featurizer_for_task(task, tokenizer, data_root, max_length, family, **settings)
    digest, inputs = cache_key(task, split, featurizer, data_root)
    final = cache_path(task, split, digest, cache_dir)
    if (final / "meta.json").is_file():
        if log:
            log(f"{task.name} {split}: features from cache {final}")
        return F.load_features(final)
    build_features(task, split, featurizer, data_root, final, inputs, log)
    return F.load_features(final)


def build_features(task, split, featurizer, data_root, final, inputs=None, log=None):
    """Read + featurize into a temporary folder beside `final`, then rename it into place."""
    from data_adapters import ReadReport, read_task

    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    temporary = final.parent / f".{final.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    temporary.mkdir()
    try:
        read_report = ReadReport()
        features = featurizer.featurize(read_task(task, split, data_root, read_report), temporary)
        features.meta["read"] = read_report.as_dict()
        features.meta["key"] = inputs
        F.save_meta(features, temporary)  # meta.json last: its presence means complete
        del features  # close the memory maps before the rename
        try:
            os.replace(temporary, final)
        except OSError:
            if not (final / "meta.json").is_file():
                raise
            # Another process built the same features first: keep theirs.
            shutil.rmtree(temporary, ignore_errors=True)
        if log:
            log(f"{task.name} {split}: {read_report.summary()}; features: "
                f"{F.load_features(final).report.summary()} -> {final}")
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return final


# ---------------------------------------------------------------- streams


class TaskStream:
    """Endless batches of one task's features, padded to each batch's longest row.

    Length buckets: each epoch shuffles the rows (seeded by (seed, epoch)),
    cuts the order into buffers of `batch_size * bucket_batches` rows, sorts
    each buffer by length and slices it into batches, then shuffles the batch
    order, so a batch holds rows of similar length and padding stays small.
    The whole plan is a function of (seed, epoch); the position is
    (epoch, index of the next batch), which is all `state()` needs. mlm masks
    come from an rng seeded by (seed, epoch, index): a restored stream repeats
    them exactly.
    """

    def __init__(self, features, batch_size, seed=0, bucket_batches=32, shuffle=True,
                 drop_remainder=False, pad_to=None):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if len(features) == 0:
            raise ValueError(f"task {features.meta.get('task')!r} has no feature rows to batch "
                             f"({features.report.summary()})")
        if drop_remainder and len(features) < batch_size:
            raise ValueError(f"task {features.meta.get('task')!r} has {len(features)} rows, "
                             f"fewer than one batch of {batch_size} with drop_remainder")
        self.features, self.batch_size, self.seed = features, batch_size, seed
        self.bucket_batches, self.shuffle = bucket_batches, shuffle
        self.drop_remainder, self.pad_to = drop_remainder, pad_to
        self.epoch, self.index = 0, 0
        self._plan = (None, None)

    def plan(self, epoch):
        """The epoch's batches: a list of row-index arrays."""
        if self._plan[0] == epoch:
            return self._plan[1]
        rng = np.random.default_rng([self.seed, epoch])
        n = len(self.features)
        order = rng.permutation(n) if self.shuffle else np.arange(n)
        lengths = self.features.lengths()
        buffer = self.batch_size * max(1, self.bucket_batches)
        batches = []
        for start in range(0, n, buffer):
            chunk = order[start:start + buffer]
            chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
            batches.extend(chunk[i:i + self.batch_size] for i in range(0, len(chunk), self.batch_size))
        if self.drop_remainder:
            batches = [b for b in batches if len(b) == self.batch_size]
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        self._plan = (epoch, batches)
        return batches

    def batches_per_epoch(self):
        return len(self.plan(self.epoch))

    def next_batch(self):
        batches = self.plan(self.epoch)
        if self.index >= len(batches):
            self.epoch, self.index = self.epoch + 1, 0
            batches = self.plan(self.epoch)
        rows = batches[self.index]
        rng = np.random.default_rng([self.seed, self.epoch, self.index, 1])
        self.index += 1
        return self.features.batch(rows, rng, self.pad_to)

    def __iter__(self):
        while True:
            yield self.next_batch()

    def state(self):
        return {"epoch": self.epoch, "index": self.index, "seed": self.seed,
                "batch_size": self.batch_size, "rows": len(self.features)}

    def restore(self, state):
        """Continue from `state()`; refuses a state from other data or settings."""
        for key, mine in (("seed", self.seed), ("batch_size", self.batch_size),
                          ("rows", len(self.features))):
            if key in state and state[key] != mine:
                raise ValueError(f"cannot resume task {self.features.meta.get('task')!r}: the saved "
                                 f"stream had {key}={state[key]}, this one {mine} (same data, "
                                 "seed and batch_size are needed to repeat the order)")
        self.epoch, self.index = int(state["epoch"]), int(state["index"])


def iterate_batches(features, batch_size, pad_to=None, seed=0):
    """One pass in row order (evaluation): no shuffling, no bucketing."""
    for start in range(0, len(features), batch_size):
        rows = np.arange(start, min(start + batch_size, len(features)))
        yield features.batch(rows, np.random.default_rng([seed, start]), pad_to)
