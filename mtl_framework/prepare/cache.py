"""Feature cache: keys, folders, locks, building and loading.

    features = cached_features(task, "train", tokenizer, data_root)  # built once, then mmap'd
    batch = features.batch(rows, rng)    # dict of arrays, docs/batches.md
    (batches of a whole split: mixture.TaskStream for training, mixture.iterate_batches for evaluation)

Features are written once per content hash of everything that decides them:
the task's spec content (type, format, files, options, fields, labels), the
data files (path, size, SHA-256 of the content), the adapter (format name + source of its
modules), the tokenizer (vocab + settings fingerprint), max_length, the
featurizer settings, the source of the family's featurizing code (its
featurizer class and every function, class and constant of the package it
uses, found by `code_version`; editing another family or a docstring elsewhere
rebuilds nothing) and STORAGE_VERSION. Any change gives a new folder
`<cache root>/<task>/<split>-<hash>/`; old folders are left for you to delete.

Where: $MTL_CACHE_DIR, else the experiment's `cache_dir` (the `cache_dir=`
argument), else `$XDG_CACHE_HOME/mtl_framework/features` (default
`~/.cache/mtl_framework/features`): never a folder that depends on where the
command was started.

Safe to share between runs: a folder is built under a temporary name and
renamed into place (os.replace), with an OS lock per folder (it dies with its
process) so a second process waits for the first instead of building the same
features again. A folder whose arrays do not match its meta.json (missing meta,
a truncated or swapped array, labels outside the task's labels) is rebuilt
with a warning naming it. Loading memory-maps the `.npy` files: nothing is
tokenized and memory holds only the rows a batch touches.
"""
import contextlib
import dis
import errno
import fcntl
import hashlib
import importlib
import inspect
import json
import os
import shutil
import sys
import uuid
from pathlib import Path

import numpy as np

from mtl_framework.families import featurizer_for_task, load_features
from mtl_framework.families.features import Features, save_meta

CACHE_ENV = "MTL_CACHE_DIR"
# Version of the folder layout (file names, meta.json keys): bump it when that changes.
STORAGE_VERSION = 2
# Spec keys that decide the examples and their labels (description, rate... do not).
SPEC_KEYS = ("type", "format", "files", "options", "fields", "multi_label")
# Packages whose code is followed when hashing a featurizer (the rest is pinned by version).
OWN_PACKAGES = ("mtl_framework",)


def default_cache_root():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mtl_framework" / "features"


def cache_root(cache_dir=None):
    """$MTL_CACHE_DIR wins, then `cache_dir` (the experiment's key), then the default."""
    return Path(os.environ.get(CACHE_ENV) or cache_dir or default_cache_root())


TEMPORARY = ".tmp-"  # `.<folder>.tmp-<pid>-<random>`: a build in progress (or killed)


def make_cache_folder(folder):
    """mkdir -p a folder of the cache, or one UserError naming it ($MTL_CACHE_DIR a file,
    read-only), and remove the temporary folders of builds whose process is gone."""
    from mtl_framework.errors import UserError

    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
    except OSError as error:
        where = f"$MTL_CACHE_DIR={os.environ[CACHE_ENV]}" if os.environ.get(CACHE_ENV) else \
            "the feature cache"
        raise UserError(f"{folder}: cannot create it ({error.strerror}; {where}): set "
                        f"{CACHE_ENV} or cache_dir to a folder you can write") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(f"{folder}: not writable (the feature cache): set {CACHE_ENV} or "
                        "cache_dir to a folder you can write")
    remove_dead_temporaries(folder)


def remove_dead_temporaries(folder):
    """Remove `*.tmp-<pid>-*` entries of `folder` whose pid is no running process (a
    killed build or worker left them); a live pid's is a build in progress. Returns them."""
    removed = []
    for name in os.listdir(folder):
        if TEMPORARY not in name:
            continue
        pid = name.split(TEMPORARY, 1)[1].split("-", 1)[0]
        if pid.isdigit() and not process_alive(int(pid)):
            remove_folder(Path(folder) / name)
            removed.append(name)
    return removed


def process_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def remove_folder(path):
    shutil.rmtree(path, ignore_errors=True)
    if os.path.lexists(path) and not os.path.isdir(path):
        os.remove(path)


def warn(message):
    print(f"mtl: warning: {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- keys


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


_VERSIONS = {}  # roots -> code_version (the source does not change while a process runs)


def code_version(*roots):
    """Hash of the source of `roots` (classes or functions) and of everything of
    this package they use, transitively: base classes, methods, class settings,
    the module-level functions, classes and constants their code names (imports
    inside a function included). Docstrings of modules and code no root reaches
    do not count."""
    if roots not in _VERSIONS:
        _VERSIONS[roots] = _code_version(roots)
    return _VERSIONS[roots]


def _code_version(roots):
    sources, todo = {}, list(roots)
    while todo:
        obj = todo.pop()
        name = f"{obj.__module__}.{obj.__qualname__}"
        if name in sources:
            continue
        sources[name] = _source(obj)
        for used, value in _used_by(obj):
            if isinstance(value, (str, int, float, bool, tuple, type(None))):
                sources.setdefault(f"{obj.__module__}:{used}", repr(value))
            elif _own(value):
                todo.append(value)
    digest = hashlib.sha256()
    for name in sorted(sources):
        digest.update(name.encode() + b"\0" + sources[name].encode() + b"\0")
    return digest.hexdigest()[:16]


def _source(obj):
    """A function's source; a class's methods' sources and other attributes (its
    own getsource parses the whole module: slow, and the methods are what runs)."""
    if not inspect.isclass(obj):
        return inspect.getsource(obj)
    parts = []
    for key, value in vars(obj).items():
        value = getattr(value, "__func__", value)
        value = value.fget if isinstance(value, property) else value
        if inspect.isfunction(value):
            parts.append(f"{key}: {inspect.getsource(value)}")
        elif not key.startswith("__"):  # not Python's own (pickle adds __slotnames__)
            parts.append(f"{key} = {value!r}")
    return "\n".join(parts)


def _own(value):
    return (inspect.isclass(value) or inspect.isfunction(value)) and \
        getattr(value, "__module__", "").split(".")[0] in OWN_PACKAGES


def _used_by(obj):
    """(name, value) of the globals (and imported names) the code of `obj` refers to."""
    if inspect.isclass(obj):
        yield from ((base.__name__, base) for base in obj.__bases__)
    scope = vars(sys.modules[obj.__module__])
    for module, name in _names(obj):
        if module:
            yield name, getattr(importlib.import_module(module), name, None)
        elif name in scope:
            yield name, scope[name]


_NAMES = {}


def _names(obj):
    """[(module or None, name)] the code of `obj` (a function, or a class's methods)
    loads as a global or imports: bytecode read once per object."""
    if obj in _NAMES:
        return _NAMES[obj]
    if inspect.isclass(obj):
        codes = []
        for member in vars(obj).values():
            member = getattr(member, "__func__", member)  # staticmethod / classmethod
            if isinstance(member, property):
                member = member.fget
            if inspect.isfunction(member):
                codes.append(member.__code__)
    else:
        codes = [obj.__code__]
    names = []
    while codes:
        code = codes.pop()
        codes.extend(c for c in code.co_consts if inspect.iscode(c))
        module = None
        for instruction in dis.get_instructions(code):
            if instruction.opname == "IMPORT_NAME":
                module = instruction.argval
            elif instruction.opname == "IMPORT_FROM" and module:
                names.append((module, instruction.argval))
            elif instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
                names.append((None, instruction.argval))
    _NAMES[obj] = names
    return names


def featurizer_version(featurizer):
    """What decides a featurizer's arrays in code: its class and what it uses."""
    return code_version(type(featurizer))


_DIGESTS = {}  # (device, inode, size, mtime_ns, ctime_ns) -> digest, for this process


def file_digest(path):
    """SHA-256 of a file's content, read in 1 MiB blocks (memory stays flat). The key is
    the content, not the modification time: `cp -p`, `rsync -t` and `tar -x` restore an
    old mtime on new content (bench/cache_key.py measures the cost). Hashed once per
    process while the file's status is unchanged (its ctime moves on any write and no
    tool can set it back)."""
    stat = os.stat(path)
    seen = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    if seen not in _DIGESTS:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)
        _DIGESTS[seen] = digest.hexdigest()
    return _DIGESTS[seen]


def data_files(task, split, data_root):
    """[(path as read, size, SHA-256 of the content)] of a split's files (every file of a
    listed folder; an absent `optional` file as (path, None, None)): edited data means new
    features."""
    from data_adapters import split_paths

    present, absent = split_paths(task, split, data_root)  # KeyError / FileNotFoundError
    out = []
    for path in present:
        relative = _relative(path, data_root)
        for file in sorted(path.rglob("*")) if path.is_dir() else [path]:  # a folder: its files
            if file.is_file() or file == path:
                out.append((relative if file == path else f"{relative}/"
                            f"{file.relative_to(path)}", file.stat().st_size, file_digest(file)))
    # Absent optional files are keyed too: their arrival means new features.
    return out + [(_relative(path, data_root), None, None) for path in absent]


def _relative(path, data_root):
    try:
        return str(path.relative_to(data_root))
    except ValueError:
        return str(path)  # an absolute path in the spec


def cache_key(task, split, featurizer, data_root):
    """(hex digest, the inputs it hashes) for one task split and featurizer."""
    inputs = {
        "task": task.name, "split": split,
        "spec": {key: getattr(task, key, None) for key in SPEC_KEYS},
        "data": data_files(task, split, data_root),
        "adapter": adapter_version(task.format),
        "tokenizer": featurizer.tokenizer.fingerprint(),
        "featurizer": featurizer.config(),
        "featurizer_code": featurizer_version(featurizer),
        "storage": STORAGE_VERSION,
    }
    text = json.dumps(inputs, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest(), inputs


def cache_path(task, split, digest, cache_dir=None):
    return cache_root(cache_dir) / task.name / f"{split}-{digest[:16]}"


# ---------------------------------------------------------------- build and load


class CacheNotes:
    """A `log` for many `cached_features` calls: cache hits are gathered into one summary
    line (`summary`), each named once per CacheNotes (a run's later evaluations, which load
    the same caches, add no line); every other message (a build) passes on at once."""

    def __init__(self, log):
        self.log, self.hits, self.reported = log, [], set()

    def __call__(self, message):
        self.log(message)

    def hit(self, name, split, family, path):
        if (name, split, family) not in self.reported:
            self.hits.append((name, split, family, Path(path)))

    def summary(self, what="features"):
        """`train features from cache (DIR): tnews, afqmc; mlm: tnews, afqmc`."""
        if not self.hits:
            return
        folders = {str(path.parent.parent) for *_, path in self.hits}
        groups = {}
        for name, split, family, _ in self.hits:
            splits = {s for _, s, _, _ in self.hits}
            label = (family or "") + ("" if len(splits) == 1 else f" {split}")
            groups.setdefault(label.strip(), []).append(name)
        names = "; ".join((f"{label}: " if label else "") + ", ".join(tasks)
                          for label, tasks in groups.items())
        self.log(f"{what} from cache ({folders.pop() if len(folders) == 1 else 'the cache'}): "
                 f"{names}")
        self.reported.update(hit[:3] for hit in self.hits)
        self.hits = []


def cached_features(task, split, tokenizer, data_root, cache_dir=None, max_length=None,
                    family=None, log=None, build=None, **settings):
    """Features of one task split: loaded (memory-mapped) when the cache has
    them, else read + featurized once and written. `log(message)` hears which.
    `build(task, split, featurizer, data_root, temporary)` replaces the
    single-process featurizing (mtl_framework.prepare.pipeline passes its workers')."""
    featurizer = featurizer_for_task(task, tokenizer, data_root, max_length, family, **settings)
    digest, inputs = cache_key(task, split, featurizer, data_root)
    final = cache_path(task, split, digest, cache_dir)
    make_cache_folder(final.parent)
    with folder_lock(final):
        problem = check_folder(final) if final.exists() else None
        if final.exists() and problem is None:
            if log:
                absent = [path for path, size, _ in inputs["data"] if size is None]
                note = f" (optional file(s) absent: {', '.join(absent)})" if absent else ""
                if isinstance(log, CacheNotes):
                    log.hit(task.name + note, split, family, final)
                else:
                    log(f"{task.name} {split}{f' ({family})' if family else ''}: features from "
                        f"cache {final}{note}")
            return load_features(final)
        if problem:
            warn(f"{final}: {problem}; rebuilding it")
        build_features(task, split, featurizer, data_root, final, inputs, log, build)
    return load_features(final)


def is_cached(task, split, tokenizer, data_root, cache_dir=None, max_length=None, family=None,
              **settings):
    """True when `cached_features` would load (a complete, consistent folder)."""
    featurizer = featurizer_for_task(task, tokenizer, data_root, max_length, family, **settings)
    final = cache_path(task, split, cache_key(task, split, featurizer, data_root)[0], cache_dir)
    return final.exists() and check_folder(final) is None


@contextlib.contextmanager
def folder_lock(final):
    """An exclusive OS lock per cache folder, in `<root>/.locks/` (released when the
    process dies, so a killed build leaves no stale lock)."""
    locks = final.parent.parent / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{final.parent.name}.{final.name}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_features(task, split, featurizer, data_root, final, inputs=None, log=None, build=None):
    """Read + featurize into a temporary folder beside `final`, then rename it into
    place (a bad folder already there is moved aside and removed)."""
    from data_adapters import ReadReport, read_task

    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    temporary = final.parent / f".{final.name}{TEMPORARY}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    temporary.mkdir()
    try:
        if build is not None:
            features, read_report = build(task, split, featurizer, data_root, temporary)
        else:
            read_report = ReadReport()
            features = featurizer.featurize(read_task(task, split, data_root, read_report), temporary)
        features.meta.update(read=read_report.as_dict(), key=inputs, split=split,
                             storage=STORAGE_VERSION, arrays=describe_arrays(features.arrays))
        save_meta(features, temporary)  # meta.json last: its presence means complete
        del features  # close the memory maps before the rename
        if final.exists():  # a folder that failed check_folder: out of the way first
            aside = final.parent / f".{final.name}.bad-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            os.replace(final, aside)
            shutil.rmtree(aside, ignore_errors=True)
        os.replace(temporary, final)
        if log:
            log(f"{task.name} {split}: {read_report.summary()}; features: "
                f"{load_features(final).report.summary()} -> {final}")
    except OSError as error:
        shutil.rmtree(temporary, ignore_errors=True)
        if error.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        from mtl_framework.errors import UserError

        raise UserError(f"{final}: no space left on the device while writing {task.name} "
                        f"{split}'s features; the partial folder was removed: free space, or "
                        f"set {CACHE_ENV} (or cache_dir) to a disk with room") from None
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return final


def describe_arrays(arrays):
    return {name: {"dtype": array.dtype.str, "shape": list(array.shape)}
            for name, array in sorted(arrays.items())}


def check_folder(folder):
    """None when the folder's arrays match its meta.json, else what does not."""
    folder = Path(folder)
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "no meta.json (an interrupted or damaged cache folder)"
    except (OSError, ValueError) as error:
        return f"meta.json unreadable ({error})"
    if not isinstance(meta, dict) or meta.get("storage") != STORAGE_VERSION or \
            not isinstance(meta.get("arrays"), dict):
        return f"meta.json is not a storage version {STORAGE_VERSION} description"
    arrays = {}
    for name, expected in meta["arrays"].items():
        try:
            array = np.load(folder / f"{name}.npy", mmap_mode="r")
        except (OSError, ValueError) as error:
            return f"{name}.npy unreadable ({error})"
        if array.dtype.str != expected["dtype"] or list(array.shape) != expected["shape"]:
            return (f"{name}.npy is {array.dtype.str}{list(array.shape)}, meta.json says "
                    f"{expected['dtype']}{expected['shape']}")
        arrays[name] = array
    return check_arrays(arrays, meta)


def check_arrays(arrays, meta):
    """Cross-array consistency: ragged splits end where their values end, per-row
    arrays have one value per row, labels lie in the task's label range."""
    for name, splits in arrays.items():
        if not name.endswith(".splits"):
            continue
        base = name[:-len(".splits")]
        values = len(arrays["token_ids.splits"]) - 1 if base == "choices" else len(arrays.get(base, []))
        if len(splits) == 0 or splits[0] != 0 or splits[-1] != values:
            return f"{name} does not end at the {values} values of {base}"
    rows = meta.get("report", {}).get("rows")
    features = Features(meta.get("family"), arrays, meta)
    if rows is not None and len(features) != rows:
        return f"{len(features)} rows, meta.json says {rows}"
    for name in ("label", "start", "end", "span1", "span2", "example_index", "window_start"):
        if name in arrays and len(arrays[name]) != rows:
            return f"{name} has {len(arrays[name])} rows, the features {rows}"
    return check_labels(arrays, meta)


def check_labels(arrays, meta):
    label = arrays.get("label")
    if label is None or label.dtype.kind == "f" or not len(label):
        return None
    lowest = 0 if meta.get("split") == "train" else -1  # -1: unlabelled (test splits only)
    if label.ndim == 2:
        lowest, high = 0, 1  # multi-hot
    elif "choices.splits" in arrays:
        counts = np.diff(np.asarray(arrays["choices.splits"]))
        bad = (label < lowest) | (label >= counts)
        return f"label out of range of the choices in {int(bad.sum())} rows" if bad.any() else None
    else:
        high = len(meta.get("labels") or []) - 1
    low, top = int(label.min()), int(label.max())
    if low < lowest or top > high:
        return f"label values {low}..{top} outside {lowest}..{high}"
    return None
