"""Data preparation at scale: an experiment's vocab and feature caches, built in
worker processes with a progress bar per stage.

    mtl data prepare experiments/demo.yaml --workers 2

    jobs = experiment_jobs(experiment, tasks, with_dev=True, with_mlm=True)
    prepare(jobs, tokenizer, data_root, cache_dir, workers=2)

Stages, each a tqdm bar (examples/s, ETA):
1. count: read (not featurize) the splits still to build, one job per worker,
   so the next bars know their totals;
2. vocab (from-scratch experiments only): character units counted over the
   tasks' train text in chunks, in the workers; the counts are summed in
   order, so the vocab is the one a single process builds; kept in the cache
   root under a hash of what decides it (`cached_vocab`);
3. features: every cold (task, split, family) cache. The parent reads the
   examples and hands chunks of CHUNK examples to the workers, which
   tokenize and encode them (`encode_chunk`); the parent appends each result in
   chunk order to the cache's files (`ChunkMerger`), shifting the row numbers
   that point into earlier chunks. The arrays are the ones
   `Featurizer.featurize` writes in one process (tests/test_prepare.py checks
   every family), and a big task keeps every worker busy. Jobs of at most
   1 / (2 x workers) of the examples are instead built whole, one per worker,
   most data first: the worker reads the files itself, and the parent, which
   reads serially, feeds only the big ones. At most `2 x workers` chunks are in
   flight, so memory is bounded by a few chunks whatever the data size.

Workers are started with `spawn` (never forked from a process that has
TensorFlow's threads running) and tokenize on one thread each (RAYON_NUM_THREADS=1),
so N workers use N cores. `workers <= 1` featurizes in this process, as
`cached_features` does, also on one tokenizer thread: one worker, one core.
"""
import collections
import contextlib
import hashlib
import json
import os
import pickle
import signal
import sys
import uuid
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from multiprocessing import get_context

from mtl_framework.errors import UserError
from mtl_framework.families import MLM
from mtl_framework.families.features import FeatureReport, FeatureWriter, _chunks
from mtl_framework.prepare.cache import (
    SPEC_KEYS,
    TEMPORARY,
    adapter_version,
    cache_root,
    cached_features,
    code_version,
    data_files,
    folder_lock,
    is_cached,
    make_cache_folder,
    remove_dead_temporaries,
    remove_folder,
    warn,
)
from mtl_framework.tokenizer import (
    SPECIAL_TOKENS,
    build_vocab,
    count_units,
    example_texts,
    write_vocab,
)

CHUNK = 512  # examples per chunk: Featurizer.featurize's chunk, so the arrays are the same
SMALL = 2 * CHUNK  # a job this small is always built whole in one worker (beside the others)
# Arrays holding row numbers of another ragged array (shifted by the rows of
# earlier chunks when chunks are joined); every `X.splits` is shifted by the values of X.
ROW_INDEXES = {"example_index": "example_id", "context_index": "context",
               "choices.splits": "token_ids"}


def default_workers():
    """The cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


@dataclass
class Job:
    """One feature cache to have: a task's split at a max_length, for its own family or mlm."""
    task: object
    split: str
    max_length: int
    family: str = None
    settings: dict = field(default_factory=dict)

    @property
    def name(self):
        return f"{self.task.name} {self.split}" + (f" ({MLM})" if self.family == MLM else "")


def experiment_jobs(experiment, tasks, with_dev=None, with_mlm=None):
    """The caches a run of `experiment` reads: each task's train split; dev when the
    run evaluates (eval_every > 0); each task's train text for mlm when it has mlm.
    max_length as the trainer takes it: the smaller of the task's and the experiment's."""
    from mtl_framework.plan import MLM_TASK, mlm_corpus_task, mlm_settings
    from mtl_framework.scoring.scorers import scoring_task

    names = {t["name"] for t in experiment.tasks}
    with_mlm = MLM_TASK in names if with_mlm is None else with_mlm
    with_dev = bool(experiment.eval_every) if with_dev is None else with_dev
    jobs = []
    for task in tasks:
        length = min(task.max_length, experiment.max_length)
        jobs.append(Job(task, "train", length))
        if with_dev and "dev" in (task.files or {}):
            jobs.append(Job(scoring_task(task, "dev"), "dev", length))  # as evaluation reads it
    if with_mlm:
        entry = next((t for t in experiment.tasks if t["name"] == MLM_TASK), {})
        sources = [mlm_corpus_task(experiment, entry)] if entry.get("corpus") else tasks
        jobs += [Job(t, "train", min(experiment.max_length, t.max_length), MLM,
                     mlm_settings(entry)) for t in sources]
    return jobs


# ---------------------------------------------------------------- workers


class Workers:
    """A spawn-started process pool with ordered, bounded maps (`workers <= 1`: in this process)."""

    def __init__(self, workers):
        self.count = max(1, int(workers))
        self.pool = None
        if self.count > 1:
            self.pool = ProcessPoolExecutor(self.count, mp_context=get_context("spawn"),
                                            initializer=_worker_start, initargs=(os.getpid(),))

    def map(self, fn, items, window=None):
        """fn(item) for each item, in order; at most `window` (2 x workers) pending."""
        if self.pool is None:
            yield from map(fn, items)
            return
        pending, window = collections.deque(), window or 2 * self.count
        for item in items:
            pending.append(self.submit(fn, item))
            if len(pending) >= window:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()

    def submit(self, fn, item):
        """pool.submit with SIGINT blocked: a worker it spawns inherits the mask through
        exec, so a Ctrl-C while the worker is still starting (before `_worker_start`
        ignores SIGINT) cannot end it with a KeyboardInterrupt traceback; a Ctrl-C in
        that moment stays pending for this process and is raised here on unblocking."""
        if not hasattr(signal, "pthread_sigmask"):
            return self.pool.submit(fn, item)
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            return self.pool.submit(fn, item)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)

    def close(self, interrupted=False):
        """Wait for the workers to finish; `interrupted` (Ctrl-C, an error): stop them now
        (a worker's half-built cache folder is removed by the next build's clean-up)."""
        if self.pool is None:
            return
        if interrupted:
            for process in list(getattr(self.pool, "_processes", {}).values()):
                process.terminate()
        self.pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self):
        return self

    def __exit__(self, kind, *exc):
        self.close(interrupted=kind is not None)


def _worker_start(parent):
    # One tokenizer thread per worker: N workers, N cores (not N x the rayon pool).
    os.environ["RAYON_NUM_THREADS"] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    # Ctrl-C reaches the whole process group: the parent alone handles it (and stops
    # us), so a worker prints no KeyboardInterrupt traceback of its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # spawned with SIGINT blocked (Workers.submit)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    die_with_parent(parent)


def die_with_parent(parent):
    """Linux: the kernel sends this process SIGKILL when its parent dies (SIGKILLed
    included), so no worker outlives a killed `mtl` (and with the workers gone, the
    resource tracker sees its pipe close and exits too). Elsewhere: a thread that
    watches the parent."""
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(1, signal.SIGKILL, 0, 0, 0) == 0:  # 1 = PR_SET_PDEATHSIG
            if os.getppid() != parent:  # the parent died before the prctl
                os._exit(1)
            return
    import threading
    import time

    def watch():
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


_FEATURIZER = {}  # one unpickled featurizer per worker, by the digest of its pickle


def _featurizer(blob):
    key = hashlib.sha256(blob).digest()
    if key not in _FEATURIZER:
        _FEATURIZER.clear()
        _FEATURIZER[key] = pickle.loads(blob)
    return _FEATURIZER[key]


def encode_chunk(blob, chunk):
    """(arrays, FeatureReport) of one chunk, encoded as `featurize` encodes it,
    with row numbers counted from this chunk's start."""
    featurizer = _featurizer(blob)
    writer, report = FeatureWriter(), FeatureReport()
    featurizer.start(writer)
    featurizer.check_types(chunk)
    report.examples += len(chunk)
    featurizer.encode_chunk(chunk, writer, report)
    return writer.finish(), report


def count_examples(job_and_root):
    job, data_root = job_and_root
    from data_adapters import read_task

    return sum(1 for _ in read_task(job.task, job.split, data_root))


# ---------------------------------------------------------------- joining chunks


class ChunkMerger:
    """Appends encoded chunks, in order, to one features folder."""

    def __init__(self, featurizer, directory=None):
        self.featurizer = featurizer
        self.writer, self.report = FeatureWriter(directory), FeatureReport()
        featurizer.start(self.writer)  # the arrays an empty split has, as featurize declares them
        self.length = collections.Counter(
            {name: entry[3] for name, entry in self.writer.files.items()} if directory is not None
            else {name: sum(len(p) for p in parts) for name, parts in self.writer.parts.items()})
        self.directory = directory

    def add(self, arrays, report):
        offsets = {}
        for name in arrays:
            if name in ROW_INDEXES:
                offsets[name] = self.length[ROW_INDEXES[name] + ".splits"] - 1
            elif name.endswith(".splits"):
                offsets[name] = self.length[name[:-len(".splits")]]
        for name, array in arrays.items():
            if name.endswith(".splits"):
                array = array[1:]  # the chunk's leading 0 is the previous chunk's end
            if offsets.get(name):
                array = array + array.dtype.type(offsets[name])
            self.writer.add(name, array)
            self.length[name] += len(array)
        merge_reports(self.report, report)

    def finish(self):
        return self.featurizer.finish(self.writer, self.report, self.directory)


def merge_reports(total, part):
    for key in ("examples", "spans", "spans_widened", "unlabelled"):
        setattr(total, key, getattr(total, key) + getattr(part, key))
    for key in ("truncated", "spans_lost", "dropped"):
        getattr(total, key).update(getattr(part, key))


def featurize_in_workers(workers, featurizer, examples, directory=None, progress=None, chunk=CHUNK):
    """What featurizer.featurize(examples, directory, chunk) returns, chunks encoded by `workers`."""
    merger = ChunkMerger(featurizer, directory)
    encode = partial(encode_chunk, pickle.dumps(featurizer))
    for arrays, report in workers.map(encode, _chunks(examples, chunk)):
        merger.add(arrays, report)
        if progress is not None:
            progress.update(report.examples)
    return merger.finish()


def builder(workers, progress=None):
    """A `build=` for cache.cached_features that featurizes in `workers`."""
    from data_adapters import ReadReport, read_task

    def build(task, split, featurizer, data_root, temporary):
        read_report = ReadReport()
        examples = read_task(task, split, data_root, read_report)
        if workers.pool is None:
            with one_tokenizer_thread():
                features = featurizer.featurize(_counting(examples, progress), temporary)
        else:
            features = featurize_in_workers(workers, featurizer, examples, temporary, progress)
        return features, read_report

    return build


@contextlib.contextmanager
def one_tokenizer_thread():
    """Tokenize on the calling thread only while featurizing in this process, so that
    `--workers 1` uses one core as each worker does (`tokenizers` reads
    TOKENIZERS_PARALLELISM at every batch; by default it spreads a batch over every core)."""
    before = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        yield
    finally:
        if before is None:
            del os.environ["TOKENIZERS_PARALLELISM"]
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = before


def _counting(examples, progress):
    for example in examples:
        if progress is not None:
            progress.update(1)
        yield example


# ---------------------------------------------------------------- vocab


def vocab_key(tasks, data_root, max_size):
    """What decides a vocab built from the tasks' train text."""
    inputs = {"tasks": [{"task": t.name, "spec": {k: getattr(t, k, None) for k in SPEC_KEYS},
                         "data": data_files(t, "train", data_root),
                         "adapter": adapter_version(t.format)} for t in tasks],
              "max_size": max_size,
              "code": code_version(count_units, build_vocab, example_texts)}
    text = json.dumps(inputs, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def cached_vocab(tasks, data_root, max_size=12000, cache_dir=None, workers=None, log=None,
                 total=None):
    """Path of the character vocab built from the tasks' train text (in the cache
    root; built once, in `workers` processes, with a progress bar). Its meta.json holds
    the vocab's SHA-256 and token count: a folder that does not match it (a cut or
    edited vocab.txt, a missing meta.json) is rebuilt, with a warning naming it."""
    final = cache_root(cache_dir) / ".vocab" / vocab_key(tasks, data_root, max_size)[:16]
    path = final / "vocab.txt"
    make_cache_folder(final.parent)
    with folder_lock(final):
        problem = check_vocab_folder(final) if final.exists() else None
        if final.exists() and problem is None:
            return path
        if problem:
            warn(f"{final}: {problem}; rebuilding it")
        own = workers is None
        workers = Workers(default_workers()) if own else workers
        try:
            if total is None:
                total = sum(count_jobs([Job(t, "train", 0) for t in tasks], data_root,
                                       workers).values())
            counts, reports = count_vocab(tasks, data_root, workers, total)
        except BaseException:
            if own:
                workers.close(interrupted=True)
            raise
        if own:
            workers.close()
        tokens = build_vocab(counts, max_size=max_size)
        if len(tokens) == len(SPECIAL_TOKENS):  # every text would be [UNK]
            # a task with no row at all says so first: its line names the file to fix
            empty = next((t for t in tasks if t.type != MLM and reports[t.name].examples == 0),
                         None)
            if empty is not None:
                raise UserError(no_rows_message(empty, data_root=data_root,
                                                read=reports[empty.name].as_dict()))
            raise UserError(f"{', '.join(t.name for t in tasks)}: no character in the train "
                            "text to build a vocab from (every token would be [UNK]): give "
                            "backbone.vocab, or tasks whose files hold text")
        temporary = final.parent / f".{final.name}{TEMPORARY}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        temporary.mkdir()
        try:
            write_vocab(tokens, temporary / "vocab.txt")
            digest = hashlib.sha256((temporary / "vocab.txt").read_bytes()).hexdigest()
            (temporary / "meta.json").write_text(json.dumps(
                {"sha256": digest, "tokens": len(tokens)}), encoding="utf-8")  # last: complete
            if final.exists():  # the damaged folder, out of the way
                remove_folder(final)
            os.replace(temporary, final)
        finally:
            remove_folder(temporary)
    if log:
        log(f"built a character vocab from the tasks' train text: {path}")
    return path


def check_vocab_folder(folder):
    """None when vocab.txt matches its meta.json (hash, token count), else what does not."""
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        expected, tokens = meta["sha256"], meta["tokens"]
    except FileNotFoundError:
        return "no meta.json (an interrupted or damaged vocab folder)"
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"meta.json unreadable ({error})"
    try:
        data = (folder / "vocab.txt").read_bytes()
    except OSError as error:
        return f"vocab.txt unreadable ({error.strerror or error})"
    if hashlib.sha256(data).hexdigest() != expected:
        lines = data.count(b"\n")
        return (f"vocab.txt ({lines} lines) is not the vocab meta.json describes "
                f"({tokens} tokens): cut or changed")
    return None


def count_vocab(tasks, data_root, workers, total=None):
    """(Counter of the tasks' train text units, {task name: its ReadReport})."""
    from data_adapters import ReadReport, read_task

    counts, reports = collections.Counter(), {}
    with progress_bar("vocab", total) as bar:
        for task in tasks:
            reports[task.name] = ReadReport()
            examples = read_task(task, "train", data_root, reports[task.name])
            for part, n in workers.map(_count_with_size, _text_chunks(examples)):
                counts.update(part)
                bar.update(n)
    return counts, reports


def _text_chunks(examples):
    for chunk in _chunks(examples, CHUNK):
        yield len(chunk), [text for example in chunk for text in example_texts(example)]


def _count_with_size(item):
    n, texts = item
    return count_units(texts), n


# ---------------------------------------------------------------- the whole preparation


def progress_bar(stage, total=None):
    from mtl_framework.console import progress_bar as bar

    return bar(stage, total)


def prepare(jobs, tokenizer, data_root, cache_dir=None, workers=None, log=print, workers_pool=None):
    """Build every job's cache that is not there yet (cold ones only); returns those jobs.
    Most jobs are built whole, one per worker, most data first (`whole_jobs`), while
    the ones too big for that are cut into chunks for all the workers."""
    pending = [job for job in jobs if not is_cached(job.task, job.split, tokenizer, data_root,
                                                       cache_dir, job.max_length, job.family,
                                                       **job.settings)]
    if not pending:
        return []
    pool = workers_pool or Workers(workers or default_workers())
    try:
        sizes = count_jobs(pending, data_root, pool)
        size = {job.name: sizes[(job.task.name, job.split, job.family)] for job in pending}
        log(f"preparing {len(pending)} of {len(jobs)} feature caches "
            f"({sum(size.values())} examples read) with {pool.count} worker(s)")
        with progress_bar("features", sum(size.values())) as bar:
            whole = whole_jobs(pending, size, pool.count, data_root) if pool.pool is not None else []
            futures = []
            for job in whole:
                futures.append(pool.pool.submit(build_whole, (job, tokenizer, data_root, cache_dir)))
                futures[-1].add_done_callback(lambda _, n=size[job.name]: bar.update(n))
            build = builder(pool, bar)
            for job in pending:
                if job not in whole:
                    bar.set_postfix_str(job.name, refresh=False)
                    cached_features(job.task, job.split, tokenizer, data_root, cache_dir,
                                      job.max_length, job.family, build=build, **job.settings)
            for future in futures:
                future.result()
    except BaseException:
        if pool is not workers_pool:
            pool.close(interrupted=True)
            for folder in {cache_root(cache_dir) / job.task.name for job in pending}:
                if folder.is_dir():  # what the stopped workers were building
                    remove_dead_temporaries(folder)
        raise
    else:
        if pool is not workers_pool:
            pool.close()
    return pending


def whole_jobs(jobs, size, workers, data_root):
    """The jobs each built whole in one worker: every job of at most 1 / (2 x workers)
    of all the examples (and always those of at most SMALL), the most bytes of data
    first so that the last to finish are short (examples are a poor measure of work:
    an mrc context or a long document is many rows). A worker reads its job's files
    itself, so the parent reads, and pickles, only the examples of the jobs too big
    to leave to one worker, which it cuts into chunks for all of them."""
    limit = max(SMALL, sum(size[job.name] for job in jobs) // (2 * workers))
    chosen = [job for job in jobs if size[job.name] <= limit]
    return sorted(chosen, key=lambda job: -sum(
        file_size for _, file_size, _ in data_files(job.task, job.split, data_root)))


def build_whole(item):
    """(In a worker) one small job's cache, featurized in that worker."""
    job, tokenizer, data_root, cache_dir = item
    cached_features(job.task, job.split, tokenizer, data_root, cache_dir, job.max_length,
                      job.family, **job.settings)


_COUNTS = {}  # (task, split, its data files' stat) -> examples read, for this process


def count_jobs(jobs, data_root, workers):
    """{(task, split, family): examples read}: one read per task split, in the workers
    (a split already counted by this process with the same files is not read again)."""
    keys = {(job.task.name, job.split): (job.task.name, job.split, json.dumps(
        data_files(job.task, job.split, data_root))) for job in jobs}
    by_name = {job.task.name: job.task for job in jobs}
    todo = [pair for pair, key in keys.items() if key not in _COUNTS]
    if todo:
        items = [(Job(by_name[name], split, 0), data_root) for name, split in todo]
        with progress_bar("count", None) as bar:
            for pair, n in zip(todo, workers.map(count_examples, items)):
                _COUNTS[keys[pair]] = n
                bar.update(n)
    return {(job.task.name, job.split, job.family): _COUNTS[keys[(job.task.name, job.split)]]
            for job in jobs}


def prepare_experiment(experiment_path, workers=None, data_root=None, log=print):
    """`mtl data prepare`: the vocab (when the experiment builds one) and every cache
    a run of the experiment reads. Returns (vocab path, {job name: Features})."""
    from mtl_framework.plan import plan_run, vocab_sources
    from mtl_framework.tokenizer import Tokenizer

    plan = plan_run(experiment_path, data_root=data_root)  # every check `mtl train` makes first
    experiment, data_root = plan.experiment, plan.data_root
    cache_dir = experiment.resolve_path(experiment.raw.get("cache_dir"))
    jobs = experiment_jobs(experiment, plan.tasks)
    with Workers(workers or default_workers()) as pool:
        vocab = plan.vocab or cached_vocab(vocab_sources(plan), data_root,
                                           experiment.backbone.get("vocab_size", 12000),
                                           cache_dir, pool, log)
        tokenizer = Tokenizer(str(vocab))
        prepare(jobs, tokenizer, data_root, cache_dir, log=log, workers_pool=pool)
    return vocab, {job.name: cached_features(job.task, job.split, tokenizer, data_root,
                                               cache_dir, job.max_length, job.family, **job.settings)
                   for job in jobs}


# --- a run's data: its vocab and train streams -------------------------------------------

def prepare_vocab(plan, log):
    """(Tokenizer, path of its vocab.txt) of the run: `run_vocab`'s."""
    from mtl_framework.tokenizer import Tokenizer

    path = run_vocab(plan, log)
    return Tokenizer(path), path


def run_vocab(plan, log):
    """The vocab.txt a run tokenizes with: the run directory's own once it holds
    checkpoints, else the vocab the experiment names (or its backbone folder's), else one
    built from the tasks' train text and the mlm corpus (in worker processes, kept in the
    cache root; `Run.train` copies it into the run directory)."""
    from mtl_framework.plan import vocab_sources

    if plan.checkpoints and os.path.exists(plan.run.vocab_path):
        return plan.run.vocab_path
    if plan.vocab:
        return plan.vocab
    experiment = plan.experiment
    return str(cached_vocab(vocab_sources(plan), plan.data_root,
                            experiment.backbone.get("vocab_size", 12000),
                            experiment.resolve_path(experiment.raw.get("cache_dir")), log=log))


def train_streams(plan, tokenizer, log):
    """({task: TaskStream}, {task: examples}) of the run's tasks, in run order, and the
    reserved mlm task's RoundRobin when the experiment has it: the feature caches built
    first (cold ones in worker processes), then loaded, one summary line."""
    from mtl_framework.families import family as family_of
    from mtl_framework.mixing.mixture import task_streams
    from mtl_framework.plan import MLM_TASK, mlm_corpus_task, mlm_settings
    from mtl_framework.prepare.cache import CacheNotes

    experiment = plan.experiment
    cache_dir = experiment.resolve_path(experiment.raw.get("cache_dir"))
    prepare(experiment_jobs(experiment, plan.tasks), tokenizer, plan.data_root, cache_dir, log=log)
    notes = CacheNotes(log)  # the caches loaded: one line
    features = {}
    for task in plan.tasks:
        features[task.name] = cached_features(task, "train", tokenizer, plan.data_root, cache_dir,
                                              max_length=min(task.max_length,
                                                             experiment.max_length), log=notes)
        if len(features[task.name]) == 0:
            raise UserError(no_rows_message(task, features[task.name], plan.data_root))
        skipped = skipped_rows_line(task, features[task.name])
        if skipped:
            log(skipped)
        problem = family_of(task.type).train_problem
        line = problem and problem(task, features[task.name], experiment.batch_size)
        if line:
            raise UserError(line)
    mlm = None
    if MLM_TASK in plan.entries:  # MLM rows, masked per batch: from the entry's own `corpus`
        entry = plan.entries[MLM_TASK]  # (text_lines), else from every task's train texts
        sources = [mlm_corpus_task(experiment, entry)] if entry.get("corpus") else plan.tasks
        mlm = [cached_features(t, "train", tokenizer, plan.data_root, cache_dir,
                               max_length=min(experiment.max_length, t.max_length), family=MLM,
                               log=notes, **mlm_settings(entry)) for t in sources]
        if not any(len(f) for f in mlm):
            raise UserError(f"{experiment.path}: mlm has no text to learn from "
                            + ("(its corpus has no non-blank line)" if entry.get("corpus")
                               else "(the tasks' train splits have none)"))
    notes.summary("train features")
    return task_streams(features, mlm, experiment.batch_size, experiment.seed, MLM_TASK)


def no_rows_message(task, features=None, data_root=None, read=None):
    """A train split nothing could be learned from, with what the adapter skipped and where
    (and the files read: an empty file has no skipped row to name it). From its features'
    meta, or from the adapter's `read` report alone (no row read: nothing featurized)."""
    from data_adapters import split_paths

    read = features.meta.get("read", {}) if read is None else read
    files = "" if data_root is None else " (" + ", ".join(
        str(path) for path in split_paths(task, "train", data_root)[0]) + ")"
    reasons = skipped_reasons(read)
    # examples read but each left out by the featurizer (a contrastive task on rows without
    # a text_b): its reasons, or the line would say 400 were read and none used, not why
    dropped = {} if features is None else features.meta.get("report", {}).get("dropped", {})
    left_out = "; ".join(f"{reason}: {n}" for reason, n in list(dropped.items())[:2])
    return (f"{task.spec_path}:{task.line}: task {task.name!r} has no usable train rows "
            f"({read.get('examples', 0)} examples read"
            + (f"; skipped {read.get('skipped_total')}: {reasons}" if reasons else "")
            + (f"; left out by the featurizer: {left_out}" if left_out else "")
            + f"): fix its train file{files} or leave the task out")


def skipped_reasons(read, shown=2):
    """The first `shown` reasons rows were skipped for, each with its count and first lines."""
    return "; ".join(f"{reason}: {entry['count']} (e.g. {', '.join(entry['first'][:2])})"
                     for reason, entry in list(read.get("skipped", {}).items())[:shown])


def skipped_rows_line(task, features):
    """The line `mtl train` prints for a task whose train rows were partly skipped (bad rows
    are counted with their line and reason, never dropped in silence), else None."""
    read = features.meta.get("read", {})
    total = read.get("skipped_total", 0)
    if not total:
        return None
    more = len(read.get("skipped", {})) - 2
    return (f"{task.name}: skipped {total} of {total + read.get('examples', 0)} train rows: "
            f"{skipped_reasons(read)}{f'; and {more} other reason(s)' if more > 0 else ''} "
            f"(`mtl data stats {task.name} --split train` lists them)")
