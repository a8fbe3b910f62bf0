"""Ctrl-C and SIGKILL (issue 24): `mtl train` and `mtl data prepare` stop on SIGINT with
one line and exit 130, leaving no worker and no temporary folder; a SIGKILLed parent
leaves no worker (they die with it); the next build removes the temporary folders of
dead processes; metrics.jsonl and evaluations.jsonl hold each step once after a resume.

Real processes, signalled while they work: each waits on the file or line that shows the
work is under way (never a fixed sleep), so the tests do not depend on the CPU's speed.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_faults import DEMO_DATA, REPO, experiment, write

from mtl_framework.cli import main as mtl
from mtl_framework.prepare import cache as C
from mtl_framework.rundir import RunDir, records
from mtl_framework.rundir import run_dir as layout

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux /proc")


def env():
    out = {k: v for k, v in os.environ.items() if k not in ("MTL_VERBOSE",)}
    out["PYTHONPATH"] = os.pathsep.join([str(REPO), out.get("PYTHONPATH", "")])
    return out


def as_in_a_terminal():
    """SIGINT at its default in the child, as in a terminal's foreground job: a test suite
    started in the background by a shell without job control (`make test &`, nohup)
    inherits SIGINT ignored, and so would `mtl`, which then never sees the Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(argv, folder):
    """`mtl ARGV` as a process of its own session (SIGINT as a terminal's Ctrl-C sends it,
    to the whole group), stderr to a file."""
    err = open(folder / "stderr.txt", "w")
    process = subprocess.Popen([sys.executable, "-m", "mtl_framework", *map(str, argv)],
                               stdout=subprocess.DEVNULL, stderr=err, env=env(), cwd=folder,
                               start_new_session=True, preexec_fn=as_in_a_terminal)
    return process, folder / "stderr.txt"


def wait_for(condition, process, timeout=240):
    deadline = time.time() + timeout
    while not condition():
        assert process.poll() is None, "the process ended before the moment to signal it"
        assert time.time() < deadline, "timed out waiting"
        time.sleep(0.1)


def descendants(pid):
    """Every process below `pid` now (its children's children too), from /proc."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            found += children
            todo += children
    return found


def alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_gone(pids, timeout=30):
    deadline = time.time() + timeout
    while any(alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def temporaries(folder):
    return sorted(str(p) for p in Path(folder).rglob(f"*{C.TEMPORARY}*"))


def steps_in(path):
    return [json.loads(line)["step"] for line in Path(path).read_text().splitlines()]


# --- Ctrl-C in training, then a resume: each step once ------------------------------------

def test_ctrl_c_in_train_is_one_line_and_the_resume_keeps_each_step_once(tmp_path, capsys):
    path = experiment(tmp_path, tasks=["tnews"], steps=100000, checkpoint_every=3,
                      eval_every=2, eval_batches=1, cache_dir=str(tmp_path / "cache"))
    run = tmp_path / "run"
    process, stderr = start(["train", path, "--output", run], tmp_path)
    metrics = run / "metrics.jsonl"
    wait_for(lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 5, process)
    workers = descendants(process.pid)
    os.killpg(process.pid, signal.SIGINT)
    assert process.wait(timeout=120) == 130
    lines = [line for line in stderr.read_text().splitlines() if line.strip()]
    assert "Traceback" not in stderr.read_text()
    last = lines[-1]
    kept = RunDir(run).checkpoint_names()
    newest = layout.checkpoint_step(kept[-1])
    stopped = max(steps_in(metrics))
    assert last == (f"interrupted at update {stopped}; `mtl train {path} --output {run} --resume` "
                    f"continues from update {newest}")
    assert wait_gone(workers) == []
    # a killed append: the last line cut short
    with open(metrics, "a") as f:
        f.write('{"step": 99999, "lo')
    # updates newest+1..stopped (none when Ctrl-C came right after a checkpoint) are
    # trained again below and must not be recorded twice (test_trim_records: always some)
    again = experiment(tmp_path, "again.yaml", tasks=["tnews"], steps=stopped + 2,
                       checkpoint_every=3, eval_every=2, eval_batches=1,
                       cache_dir=str(tmp_path / "cache"))
    assert mtl(["train", str(again), "--output", str(run), "--resume"]) == 0
    assert steps_in(metrics) == list(range(1, stopped + 3))
    evaluated = [line["step"] for line in RunDir(run).read_evaluations()]
    assert evaluated == sorted(set(evaluated))  # each evaluated step once
    assert evaluated[-1] == stopped + 2


def test_trim_records_cuts_later_steps_and_a_cut_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s}) + "\n" for s in range(1, 8)) + '{"step": 8, ')
    assert records.trim_records(str(path), 5, log=None) == 3
    assert steps_in(path) == [1, 2, 3, 4, 5]
    before = path.read_bytes()
    assert records.trim_records(str(path), 5, log=None) == 0 and path.read_bytes() == before


# --- Ctrl-C and SIGKILL in preparation ------------------------------------------------------

@pytest.fixture(scope="module")
def big_data(tmp_path_factory):
    """A TNEWS-format train file of 60,000 rows (the demo's 2,000, repeated with a row
    number), so that preparing it takes long enough to be interrupted on any CPU."""
    root = tmp_path_factory.mktemp("big")
    rows = [json.loads(line) for line in (DEMO_DATA / "tnews" / "train.json").read_text(
        encoding="utf-8").splitlines()]
    with open(write(root / "tnews" / "train.json", ""), "w", encoding="utf-8") as f:
        for i in range(60000):
            row = dict(rows[i % len(rows)])
            row["sentence"] = f"{row['sentence']}{i}"
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return root


def test_ctrl_c_in_prepare_stops_workers_and_leaves_no_temporary(big_data, tmp_path):
    cache = tmp_path / "cache"
    path = experiment(tmp_path, data_root=str(big_data), cache_dir=str(cache))
    process, stderr = start(["data", "prepare", path, "--workers", "2"], tmp_path)
    wait_for(lambda: len(descendants(process.pid)) >= 2 and "count" in stderr.read_text(),
             process)
    workers = descendants(process.pid)
    os.killpg(process.pid, signal.SIGINT)
    assert process.wait(timeout=120) == 130
    text = stderr.read_text()
    assert "Traceback" not in text  # the workers print none either
    assert text.splitlines()[-1] == (f"interrupted while preparing; `mtl data prepare {path}` "
                                     "continues (finished caches are kept)")
    assert wait_gone(workers) == []
    assert temporaries(cache) == []


def test_sigkill_of_the_parent_leaves_no_worker(tmp_path):
    """The workers (and the resource tracker) end when the parent is SIGKILLed."""
    script = write(tmp_path / "parent.py", (
        "import time\n"
        "from mtl_framework.prepare.pipeline import Workers\n"
        "if __name__ == '__main__':  # spawn imports this file again in each worker\n"
        "    pool = Workers(2)\n"
        "    print(sum(pool.map(abs, range(-20, 0))), flush=True)\n"
        "    time.sleep(600)\n"))
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                               env=env(), cwd=tmp_path, start_new_session=True)
    assert process.stdout.readline().strip() == "210"  # the workers did work
    below = descendants(process.pid)
    assert len(below) >= 2
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    assert wait_gone(below) == []


def test_the_next_build_removes_dead_processes_temporaries(tmp_path):
    folder = tmp_path / "cache" / "tnews"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    leftover = folder / f".train-0123{C.TEMPORARY}{dead.pid}-abcd"
    live = folder / f".train-0123{C.TEMPORARY}{os.getpid()}-abcd"
    for path in (leftover, live):
        write(path / "token_ids.npy", "x")
    C.make_cache_folder(folder)
    assert not leftover.exists()
    assert live.exists()  # a build of a running process is left alone
