"""Preparation in worker processes (mtl_framework.prepare.pipeline) gives the arrays one
process gives, for every family; `mtl data prepare` builds what a run reads."""
import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from data_adapters import read_task
from data_adapters.examples import Entity, Event, EventExample
from mtl_framework.config.experiment import load_experiment
from mtl_framework.config.registry import load_registry
from mtl_framework.families import featurizer_for_task, make_featurizer
from mtl_framework.prepare import cache as C
from mtl_framework.prepare import pipeline as P
from mtl_framework.tokenizer import Tokenizer, build_vocab, count_units, example_texts, write_vocab

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "experiments" / "demo.yaml"
CHUNK = 64  # small chunks: several per task, with a partial last one


@pytest.fixture(scope="module")
def workers():
    with P.Workers(2) as pool:
        yield pool


@pytest.fixture(scope="module")
def registry():
    return load_registry()


def same_features(a, b):
    assert sorted(a.arrays) == sorted(b.arrays)
    for name in a.arrays:
        x, y = np.asarray(a[name]), np.asarray(b[name])
        assert x.dtype == y.dtype and x.shape == y.shape, name
        assert x.tobytes() == y.tobytes(), name  # byte-identical (NaN labels included)
    assert a.meta == b.meta


def parallel_and_single(workers, featurizer, examples, tmp_path):
    (tmp_path / "single").mkdir()
    (tmp_path / "parallel").mkdir()
    single = featurizer.featurize(examples, tmp_path / "single", chunk_size=CHUNK)
    parallel = P.featurize_in_workers(workers, featurizer, iter(examples), tmp_path / "parallel",
                                      chunk=CHUNK)
    return single, parallel


# One task per family with real data in ../shared/data (extraction_event has none: below).
REAL = [("tnews", None, 300), ("afqmc", None, 300), ("stsb_zh", None, 300),
        ("cmrc2018", None, 150), ("c3_m", None, 150), ("chid", None, 150),
        ("cluener", None, 300), ("duie_spo", None, 200), ("cluewsc", None, 300),
        ("tnews", "mlm", 300), ("cmrc2018", "mlm", 100)]


@pytest.mark.parametrize("name,family,limit", REAL, ids=[f"{n}-{f or 'own'}" for n, f, _ in REAL])
def test_workers_give_the_single_process_arrays(shared_data, registry, workers, tmp_path,
                                                name, family, limit):
    task = registry.tasks[name]
    examples = list(itertools.islice(read_task(task, "train", shared_data), limit))
    texts = [t for e in examples for t in example_texts(e)]
    write_vocab(build_vocab(count_units(texts), max_size=3000), tmp_path / "vocab.txt")
    tokenizer = Tokenizer(str(tmp_path / "vocab.txt"))
    settings = {"whole_word": True} if family == "mlm" and name == "cmrc2018" else {}
    featurizer = featurizer_for_task(task, tokenizer, shared_data, 64, family, **settings)
    single, parallel = parallel_and_single(workers, featurizer, examples, tmp_path)
    assert len(single) > CHUNK  # several chunks were joined
    same_features(single, parallel)
    rows = np.arange(len(single))[:8]
    rng = lambda: np.random.default_rng(0)  # noqa: E731
    a, b = single.batch(rows, rng()), parallel.batch(rows, rng())
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_workers_give_the_single_process_event_arrays(workers, tmp_path):
    text = "毛主席在北京看书他在上海写字"
    roles = ["读:trigger", "读:人", "读:地", "写:trigger", "写:地"]
    events = [Event("读", Entity(6, 8, "trigger"), [Entity(0, 3, "人"), Entity(4, 6, "地")]),
              Event("写", Entity(12, 14, "trigger"), [Entity(10, 12, "地"), Entity(8, 9, "人")])]
    examples = [EventExample(text[:8 + i % 7], [e for e in events if e.trigger.end <= 8 + i % 7])
                for i in range(150)]
    write_vocab(build_vocab(count_units([text])), tmp_path / "vocab.txt")
    featurizer = make_featurizer("extraction_event", Tokenizer(str(tmp_path / "vocab.txt")), 12, roles)
    single, parallel = parallel_and_single(workers, featurizer, examples, tmp_path)
    same_features(single, parallel)


def test_a_featurizer_error_in_a_worker_reaches_the_caller(workers, tmp_path):
    write_vocab(build_vocab(count_units(["我爱北京"])), tmp_path / "vocab.txt")
    featurizer = make_featurizer("classification", Tokenizer(str(tmp_path / "vocab.txt")), 16,
                                 ["a"], task="toy")
    with pytest.raises(TypeError, match="toy: classification features take TextExample"):
        P.featurize_in_workers(workers, featurizer, ["not an example"] * 3, chunk=2)


def test_jobs_follow_the_experiment(registry):
    experiment = load_experiment(str(DEMO))
    tasks = registry.select([t["name"] for t in experiment.tasks if t["name"] != "mlm"])
    jobs = P.experiment_jobs(experiment, tasks)
    names = [job.name for job in jobs]
    assert len(names) == 3 * len(tasks)  # train, dev (eval_every > 0), mlm per task
    assert "cluener dev" in names and "tnews train (mlm)" in names
    cluener = registry.select(["cluener"])[0]
    assert experiment.max_length < cluener.max_length  # the experiment's cap wins
    assert {job.max_length for job in jobs if job.task.name == "cluener"} == {experiment.max_length}
    raw = {**experiment.raw, "eval_every": 0, "tasks": ["tnews"]}
    quiet = type(experiment)(path=experiment.path, raw=raw, tasks=[{"name": "tnews"}])
    assert [job.name for job in P.experiment_jobs(quiet, tasks[:1])] == ["tnews train"]


def run_cli(*args, env):
    return subprocess.run([sys.executable, "-m", "mtl_framework.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)


def small_experiment(tmp_path):
    """Three of the demo's tasks (text, windows, choices) + mlm, evaluated: train, dev, mlm jobs."""
    path = tmp_path / "small.yaml"
    path.write_text(f"""data_root: {REPO / "experiments" / "demo" / "data"}
backbone: {{num_layers: 1, hidden_size: 32, num_heads: 1, vocab_size: 3000}}
tasks: [tnews, cmrc2018, c3_d, mlm]
eval_every: 10
max_length: 128
""", encoding="utf-8")
    return path


def test_cli_prepare_builds_the_vocab_and_every_cache_a_run_reads(tmp_path, registry, monkeypatch):
    env = {**os.environ, "PYTHONPATH": str(REPO), "MTL_CACHE_DIR": str(tmp_path / "cache")}
    path = small_experiment(tmp_path)
    done = run_cli("data", "prepare", str(path), "--workers", "2", env=env)
    assert done.returncode == 0, done.stderr
    # off a terminal (a pipe here) plain lines, no bar: the closing one counts every example read
    read = re.search(r"feature caches \((\d+) examples read\)", done.stderr).group(1)
    assert re.search(rf"^features: {int(read):,} examples in [\d.]+ s \([\d,]+/s\)$",
                     done.stderr, re.M), done.stderr
    assert "\r" not in done.stderr and "%|" not in done.stderr
    assert "cmrc2018 train: 224 examples, 1964 rows" in done.stdout  # questions, not windows
    vocab = Path(done.stdout.splitlines()[0].split(": ", 1)[1])
    # The vocab is the one a single process counts from the tasks' train text.
    experiment = load_experiment(str(path))
    data_root = experiment.resolve_path(experiment.raw["data_root"])
    tasks = registry.select([t["name"] for t in experiment.tasks if t["name"] != "mlm"])
    texts = (t for task in tasks for e in read_task(task, "train", data_root) for t in example_texts(e))
    assert vocab.read_text(encoding="utf-8").split("\n")[:-1] == build_vocab(count_units(texts), 3000)
    # Every cache is there and equals the single-process build in another cache root.
    tokenizer = Tokenizer(str(vocab))
    jobs = P.experiment_jobs(experiment, tasks)
    monkeypatch.setenv("MTL_CACHE_DIR", str(tmp_path / "cache"))
    parallel = {}
    for job in jobs:
        assert C.is_cached(job.task, job.split, tokenizer, data_root, None, job.max_length,
                           job.family), job.name
        parallel[job.name] = C.cached_features(job.task, job.split, tokenizer, data_root, None,
                                               job.max_length, job.family)
    monkeypatch.setenv("MTL_CACHE_DIR", str(tmp_path / "single"))
    for job in jobs:
        single = C.cached_features(job.task, job.split, tokenizer, data_root, None,
                                   job.max_length, job.family)
        assert single.meta == parallel[job.name].meta
        same_features(single, parallel[job.name])
    again = run_cli("data", "prepare", str(path), "--workers", "2", env=env)  # warm: nothing built
    assert again.returncode == 0 and "preparing" not in again.stderr


def test_cli_prepare_refuses_bad_input_in_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "MTL_CACHE_DIR": str(tmp_path / "cache")}
    done = run_cli("data", "prepare", str(DEMO), "--workers", "0", env=env)
    assert done.returncode == 2 and done.stderr.strip() == "error: --workers must be >= 1, got 0"
    bad = tmp_path / "bad.yaml"
    bad.write_text("tasks: [tnews]\ndata_root: nowhere\n"
                   "backbone: {num_layers: 1, hidden_size: 32, num_heads: 2}\n", encoding="utf-8")
    done = run_cli("data", "prepare", str(bad), env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and f"{bad}:2: data_root " in done.stderr \
        and "nowhere: no such folder" in done.stderr  # plan.py's check, before any work
    assert not (tmp_path / "cache" / "tnews").exists() or \
        not any(p.name.startswith("train-") for p in (tmp_path / "cache" / "tnews").iterdir())


def test_one_worker_tokenizes_on_one_thread_and_restores_the_setting(monkeypatch):
    """`--workers 1` featurizes in this process with `tokenizers` on one thread
    (TOKENIZERS_PARALLELISM=false, read at every batch), then puts the setting back."""
    for before in (None, "true"):
        if before is None:
            monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
        else:
            monkeypatch.setenv("TOKENIZERS_PARALLELISM", before)
        with P.one_tokenizer_thread():
            assert os.environ["TOKENIZERS_PARALLELISM"] == "false"
        assert os.environ.get("TOKENIZERS_PARALLELISM") == before


def test_whole_jobs_leave_the_big_ones_to_chunks_and_start_with_the_most_data(tmp_path):
    """Jobs of at most 1 / (2 x workers) of the examples are built whole, the most
    bytes first; a job bigger than that is cut into chunks for all the workers."""
    from types import SimpleNamespace

    sizes = {"a": (3000, 100), "b": (900, 5000), "c": (20000, 70), "d": (2500, 900)}  # examples, bytes
    jobs, size = [], {}
    for name, (examples, nbytes) in sizes.items():
        (tmp_path / f"{name}.json").write_bytes(b"x" * nbytes)
        task = SimpleNamespace(name=name, files={"train": f"{name}.json"}, spec_path="t.yaml", line=1)
        jobs.append(P.Job(task, "train", 128))
        size[jobs[-1].name] = examples
    # 26,400 examples / (2 x 2 workers) = 6,600: c (20,000) is chunked; the rest by bytes
    assert [job.task.name for job in P.whole_jobs(jobs, size, 2, tmp_path)] == ["b", "d", "a"]
    # one worker's share is 13,200: still not c; with a single job it is chunked too
    assert [job.task.name for job in P.whole_jobs(jobs, size, 1, tmp_path)] == ["b", "d", "a"]
    assert P.whole_jobs(jobs[2:3], size, 2, tmp_path) == []
    # a job of at most SMALL examples is always whole
    assert P.whole_jobs(jobs[1:2], size, 2, tmp_path) == jobs[1:2]
