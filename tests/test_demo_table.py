"""`make demo`'s dev table (experiments/demo/dev_table.py) and README's quote of it."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "experiments" / "demo" / "dev_table.py"
spec = importlib.util.spec_from_file_location("dev_table", SCRIPT)
dev_table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(dev_table)

EVALUATION = {"step": 240, "split": "dev", "aggregate": 0.5,
              "tasks": {"tnews": {"metric": "accuracy", "score": 0.31, "baseline": 0.1,
                                  "examples": 300},
                        # a task with a publisher's scorer: its score is the scorer's figure
                        "cluener": {"metric": "span_f1", "score": 0.2361, "baseline": 0.0,
                                    "scorer": "cluener", "scorer_figure": "macro_f1",
                                    "examples": 300}}}
START = {"step": 0, "time": "2026-11-24T15:00:00+0000", "mtl_framework": "0.1.0",
         "commit": "0123456789abcdef", "dirty": False, "python": "3.11.7",
         "tensorflow": "2.21.0", "keras": "3.15.1", "tokenizers": "0.23.3"}


def fake_run(folder):
    """A run directory holding only what the script reads."""
    folder.mkdir()
    (folder / "evaluations.jsonl").write_text(
        json.dumps({**EVALUATION, "step": 60, "aggregate": 0.1}) + "\n" + json.dumps(EVALUATION) + "\n")
    (folder / "provenance.jsonl").write_text(json.dumps(START) + "\n")
    started = 1795532400  # 2026-11-24T15:00:00Z
    (folder / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "time": started + 10 * s}) + "\n" for s in (1, 2, 15)))
    return folder


def test_table_is_the_last_dev_evaluation_with_date_machine_and_versions(tmp_path):
    run = fake_run(tmp_path / "run")
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n\n{dev_table.BEGIN}\nold, typed by hand\n{dev_table.END}\n\nrest\n")
    done = subprocess.run([sys.executable, str(SCRIPT), str(run), "--readme", str(readme)],
                          capture_output=True, text=True, env={"PYTHONPATH": str(REPO)},
                          timeout=120)
    assert done.returncode == 0, done.stderr
    record = json.loads((run / "dev_scores.json").read_text())
    assert record["evaluation"] == EVALUATION and record["provenance"] == START
    assert record["date"] == "2026-11-24" and record["train_seconds"] == 150
    table = (run / "dev_scores.md").read_text()
    assert table.startswith("`make demo` on 2026-11-24, ")
    assert "mtl_framework 0.1.0 (commit 0123456789ab; TensorFlow 2.21.0, Keras 3.15.1, " \
           "tokenizers 0.23.3, Python 3.11.7); training 150 s." in table
    assert "| tnews | accuracy | 0.3100 | 0.1000 | 300 |" in table
    assert "| cluener | cluener macro_f1 | 0.2361 | 0.0000 | 300 |" in table
    assert "step 240, aggregate 0.5000" in table
    assert readme.read_text() == f"intro\n\n{dev_table.BEGIN}\n{table}{dev_table.END}\n\nrest\n"


def test_readme_quotes_a_table_of_the_demo_tasks():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert text.count(dev_table.BEGIN) == 1 and text.count(dev_table.END) == 1
    block = text.split(dev_table.BEGIN, 1)[1].split(dev_table.END, 1)[0]
    assert block.startswith("\n`make demo` on ")
    rows = [line.split("|")[1].strip() for line in block.splitlines() if line.startswith("| ")]
    demo = yaml.safe_load((REPO / "experiments" / "demo.yaml").read_text(encoding="utf-8"))
    assert rows[1:] == [t["name"] for t in demo["tasks"] if t["name"] != "mlm"]
