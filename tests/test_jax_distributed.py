"""`distribution: multi_worker` on KERAS_BACKEND=jax: 2 processes on 127.0.0.1 (1 CPU device
each, jax.distributed, gloo collectives) == one process with the same experiment; only the
chief writes the run directory. Children run tests/distributed_worker.py with .venv-jax's
Python (no TensorFlow); every multi-process test skips when .venv-jax is absent."""
import json
import os
import re
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from run_harness import TWO_WORKERS, checkpoint_state, load_state, wait_all

from mtl_framework.config.experiment import ExperimentError
from mtl_framework.step.distributed import jax_cluster

REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / "tests" / "distributed_worker.py"
JAX_PYTHON = REPO / ".venv-jax" / "bin" / "python"
TIMEOUT = 300  # the three processes together; healthy: ~15 s of CPU each
needs_jax = pytest.mark.skipif(not JAX_PYTHON.exists(), reason=".venv-jax is absent (make interop-jax)")

# 8 rows a batch, so each process holds 4 of each global batch (the test checks the
# split); max_length 16 keeps JAX to few batch shapes (one compilation each).
TINY_EXPERIMENT = {**TWO_WORKERS, "batch_size": 8, "max_length": 16}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(experiment, output, steps, dump, tf_config=None, resume=False):
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu", "CUDA_VISIBLE_DEVICES": ""}
    env.pop("XLA_FLAGS", None)  # one CPU device per process
    env.pop("TF_CONFIG", None)
    if tf_config:
        env["TF_CONFIG"] = json.dumps(tf_config)
    command = [str(JAX_PYTHON), str(WORKER), experiment, str(output),
               "multi_worker" if tf_config else "none", str(steps), str(dump)]
    return subprocess.Popen(command + (["--resume"] if resume else []), env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def two_workers(experiment, outputs, steps, dumps, resume=False):
    """Two multi_worker processes, $TF_CONFIG as the TensorFlow path reads it (the
    coordinator: worker 0's address)."""
    cluster = {"worker": [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]}
    return [start(experiment, output, steps, dump, resume=resume,
                  tf_config={"cluster": cluster, "task": {"type": "worker", "index": i}})
            for i, (output, dump) in enumerate(zip(outputs, dumps))]


def finish(processes, expect_success=True):
    return wait_all(processes, TIMEOUT, "the JAX processes", expect_success)


def relative_difference(a, b):
    """||a - b|| / ||b|| over every state variable (model and optimizer)."""
    assert len(a) == len(b)
    difference = sum(float(np.sum((x.astype("float64") - y) ** 2)) for x, y in zip(a, b))
    return (difference / sum(float(np.sum(y.astype("float64") ** 2)) for y in b)) ** 0.5


def write_experiment(folder):
    experiment = {**TINY_EXPERIMENT, "data_root": str(REPO / "experiments" / "demo" / "data"),
                  "cache_dir": str(folder / "cache")}
    path = folder / "experiment.yaml"
    path.write_text(yaml.safe_dump(experiment), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One process, 4 updates, beside 2 multi_worker processes, 4 updates (all three at
    once: the feature cache is built under a lock)."""
    folder = tmp_path_factory.mktemp("jax_distributed")
    experiment = write_experiment(folder)
    dumps = [folder / "worker0.npz", folder / "worker1.npz"]
    began = time.time()
    processes = [start(experiment, folder / "single", 4, folder / "single.npz"),
                 *two_workers(experiment, [folder / "multi"] * 2, 4, dumps)]
    logs = finish(processes)
    print(f"one process beside 2 multi_worker processes: {time.time() - began:.1f} s;",
          " | ".join(line for text in logs for line in text.splitlines() if line.startswith("done")))
    return {"folder": folder, "experiment": experiment, "logs": logs,
            "single": folder / "single", "multi": folder / "multi",
            "reference": load_state(folder / "single.npz"), "workers": [load_state(d) for d in dumps]}


@needs_jax
def test_two_processes_equal_one_process(runs):
    worker0, worker1 = runs["workers"]
    assert relative_difference(worker0, worker1) == 0.0  # one update, applied by both
    difference = relative_difference(worker0, runs["reference"])
    moved = relative_difference(checkpoint_state(runs["single"], 2), runs["reference"])
    print(f"2 processes vs one after 4 updates: {difference:.3g} relative "
          f"(updates 3-4 moved the state {moved:.3g})")
    assert difference <= 1e-5 < moved
    # what the chief wrote is what the processes hold
    assert relative_difference(checkpoint_state(runs["multi"], 4), worker0) == 0.0
    assert [line.split()[1] for text in runs["logs"][1:] for line in text.splitlines()
            if line.startswith("done")] == ["chief=True", "chief=False"]


@needs_jax
def test_only_the_chief_writes_and_evaluates_alone(runs):
    lines = (runs["multi"] / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2, 3, 4]  # one writer
    assert sorted(os.listdir(runs["multi"] / "checkpoints")) == ["step-00000002", "step-00000004"]

    def scores(run_dir):
        return [(line["step"], {task: entry["score"] for task, entry in line["tasks"].items()})
                for line in map(json.loads, (run_dir / "evaluations.jsonl").open())]
    # the chief's dev scores (computed on its device alone) are the single process's
    assert scores(runs["multi"]) == scores(runs["single"])
    assert [step for step, _ in scores(runs["multi"])] == [2, 4]


@needs_jax
@pytest.mark.slow
def test_resume_on_two_processes_and_disagreeing_checkpoints(runs, tmp_path):
    """Two processes train 2 updates, then resume to 4: the single process's step-2 and
    step-4 states. Processes that would start from different steps (one without the chief's
    checkpoints) all stop with the message instead of waiting for each other."""
    dumps = [tmp_path / f"phase{p}-worker{i}.npz" for p in (1, 2) for i in range(2)]
    experiment, resumed = runs["experiment"], tmp_path / "resumed"
    finish(two_workers(experiment, [resumed] * 2, 2, dumps[:2]))
    first = relative_difference(load_state(dumps[0]), checkpoint_state(runs["single"], 2))
    finish(two_workers(experiment, [resumed] * 2, 4, dumps[2:], resume=True))
    assert relative_difference(load_state(dumps[2]), load_state(dumps[3])) == 0.0
    end = relative_difference(load_state(dumps[2]), runs["reference"])
    print(f"2 processes vs one: {first:.3g} relative after 2 updates, {end:.3g} after "
          "resuming to 4")
    assert first <= 1e-5 and end <= 1e-5
    lines = (resumed / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2, 3, 4]

    outputs = finish(two_workers(experiment, [resumed, tmp_path / "bare"], 6,
                                 [tmp_path / "unused0.npz", tmp_path / "unused1.npz"],
                                 resume=True), expect_success=False)
    for text in outputs:
        assert "the workers disagree on the step to start from" in text, text[-2000:]


def test_the_cluster_comes_from_tf_config():
    """On JAX, $TF_CONFIG's processes in order chief, workers; process 0 coordinates."""
    cluster = {"chief": ["a:1"], "worker": ["b:2", "c:3"]}
    assert [jax_cluster(json.dumps({"cluster": cluster, "task": task})) for task in
            ({"type": "chief", "index": 0}, {"type": "worker", "index": 0},
             {"type": "worker", "index": 1})] == [("a:1", 3, 0), ("a:1", 3, 1), ("a:1", 3, 2)]
    workers = {"cluster": {"worker": ["b:2", "c:3"]}, "task": {"type": "worker", "index": 1}}
    assert jax_cluster(json.dumps(workers)) == ("b:2", 2, 1)
    for bad, message in ((None, "needs $TF_CONFIG"), ("{not json", "must be JSON like"),
                         (json.dumps({**workers, "task": {"type": "ps", "index": 0}}),
                          "chief and worker tasks only"),
                         (json.dumps({**workers, "task": {"type": "worker", "index": 2}}),
                          "task worker 2 is not in its cluster (2 process(es))")):
        with pytest.raises(ExperimentError, match=re.escape(message)):
            jax_cluster(bad)
