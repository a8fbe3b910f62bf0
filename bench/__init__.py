"""The benchmarks (docs/benchmarks.md). Each script runs as a module from the repository
root, e.g. `.venv/bin/python -m bench.backbone --quick`, and imports its siblings as
`bench.<module>`; results go to bench/results/."""
import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def child_env(**overrides):
    """os.environ for a child Python process that runs `-m bench.<module>` or should import
    this checkout's packages: the repository first on its PYTHONPATH, then `overrides`."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, **overrides}


class JsonWorker:
    """A child process (`python -m bench.<module> --worker ...`) that answers each JSON line
    on its stdin with one on its stdout; its stderr goes to `log_path`."""

    def __init__(self, command, log_path, env, name="benchmark worker", cwd=None):
        self.name, self.log = name, open(log_path, "w")
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self.log, text=True, bufsize=1, env=env, cwd=cwd)

    def read(self):
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name} died: see {self.log.name}")
        return json.loads(line)

    def ask(self, **command):
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        return self.read()


def write_results(folder, name, report, markdown):
    """A study's results: folder/NAME.json (`report`) and folder/NAME.md (`markdown`, the
    text also printed)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    (folder / f"{name}.md").write_text(markdown, encoding="utf-8")
    print(markdown)


def afqmc_pairs_spec(task, max_length, embedding, dev=True, metric_note=""):
    """A task spec of AFQMC's pairs labelled 1 as a contrastive task (the rows' label is
    read as the pair's score; positive_score 1.0): the pairs bench/contrastive_lr and
    bench/st_trainer_speed train on. `embedding` is the spec's flow mapping, as written."""
    dev_file = "\n  dev: afqmc/dev.txt" if dev else ""
    return f"""\
dataset: afqmc_positive_pairs
format: delimited
files:
  train: afqmc/train.txt{dev_file}
options:
  delimiter: "\\t"
fields:
  text: 0
  text_b: 1
  label: 2
tasks:
  - name: {task}
    type: contrastive
    max_length: {max_length}
    metric: retrieval{metric_note}
    embedding: {embedding}
"""
