"""The embeddings suite's figures equal mteb's own on the same data (issue 50): the suite scores
fixed vectors (test_faults_round5_suite.HashEncoder: a text's vector drawn from the text as
prefixed) on the demo data and on small tasks of a user's, writing each task's data with
`--mteb-data`; bench/mteb_local.py then runs mteb 2.26 (.venv-current) on that data with a
table of the same vectors, keyed by the text as mteb prompts it. So equal figures check the
scorers, the data handed over (whole splits, grouped qrels, candidates) and the prompts (a
text mteb prompted otherwise than the suite would be missing from the table).

Skips where .venv-current or its mteb is absent (`make interop-current`).
"""
import json
import subprocess

import pytest
from test_faults_round5_suite import PROMPTS, HashEncoder, argv, hashed, user_task  # noqa: F401

from mtl_framework import cli

from conftest import DEMO_DATA, REPO

CURRENT_PYTHON = REPO / ".venv-current" / "bin" / "python"

RERANK_SPEC = """\
dataset: my_rerank
description: a user's query, positive and negatives
format: pairs
files:
  train: my_rerank/train.jsonl
  dev: my_rerank/dev.jsonl
tasks:
  - name: my_rerank
    type: contrastive
    max_length: 24
    metric: reranking
    embedding: {hard_negatives: 2}
"""


def mteb_present():
    if not CURRENT_PYTHON.exists():
        return False
    return subprocess.run([str(CURRENT_PYTHON), "-c", "import mteb"], capture_output=True,
                          timeout=300).returncode == 0


def demo_tasks_in(data):
    """The demo's afqmc, cmrc2018 and tnews folders linked into `data` (one data root with the
    user's tasks)."""
    for name in ("afqmc", "cmrc2018", "tnews"):
        (data / name).symlink_to(DEMO_DATA / name)


def rerank_task(tmp_path, specs, data):
    records = [{"query": f"查询{i}", "pos": [f"正文{i}"], "neg": [f"别的{i}{k}" for k in range(i % 4 + 1)]}
               for i in range(15)]
    (data / "my_rerank").mkdir()
    for split in ("train", "dev"):
        (data / "my_rerank" / f"{split}.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    (specs / "my_rerank.yaml").write_text(RERANK_SPEC, encoding="utf-8")


def test_the_suites_figures_equal_mtebs_on_the_same_data(hashed, tmp_path):  # noqa: F811
    if not mteb_present():
        pytest.skip(".venv-current or its mteb is absent (make interop-current)")
    afqmc = [line.split("\t") for line in (DEMO_DATA / "afqmc" / "dev.txt").read_text("utf-8").splitlines()]
    specs, data = user_task(tmp_path, "my_pairs", [(a, b, int(label)) for a, b, label in afqmc],
                            "pair_classification")
    rows = [("问题零", "段落甲", 1), ("问题零", "段落乙", 1)]
    rows += [(f"问题{i}", f"段落{i}", 1) for i in range(1, 20)]
    user_task(tmp_path, "two_positives", rows, "retrieval")
    rerank_task(tmp_path, specs, data)
    demo_tasks_in(data)
    suite = tmp_path / "suite.yaml"
    suite.write_text("kind: embeddings\nbootstrap: 20\nmax_examples: 300\ntrain_examples: 600\n"
                     "samples_per_label: 8\nn_experiments: 3\ntasks:\n  - afqmc_sts\n  - my_pairs\n"
                     "  - cmrc2018_retrieval\n  - two_positives\n  - my_rerank\n  - tnews\n"
                     "  - {task: tnews, kind: clustering}\n", encoding="utf-8")
    assert cli.main(argv(hashed[:1], str(suite), tmp_path / "out", data, specs)
                    + ["--mteb-data", str(tmp_path / "mteb-data")]) == 0
    table = {"prompts": {"query": PROMPTS["query"], "document": PROMPTS["passage"]}, "vectors": {}}
    for side, texts in HashEncoder.calls:
        for text in texts:
            prompted = (PROMPTS[side] if side else "") + text
            table["vectors"][prompted] = HashEncoder.vector(prompted).tolist()
    (tmp_path / "table.json").write_text(json.dumps(table, ensure_ascii=False), encoding="utf-8")
    child = subprocess.run([str(CURRENT_PYTHON), "bench/mteb_local.py", str(tmp_path / "mteb-data"),
                            "--vectors", str(tmp_path / "table.json"), "--output",
                            str(tmp_path / "mteb.json")], cwd=REPO, capture_output=True, text=True,
                           timeout=600)
    assert child.returncode == 0, child.stderr[-3000:]
    mteb = json.loads((tmp_path / "mteb.json").read_text("utf-8"))
    assert mteb["versions"]["mteb"].startswith("2.26.")
    results = json.loads((tmp_path / "out" / "results.json").read_text("utf-8"))
    suite_rows = {r["task"]: r for r in results["rows"]}
    assert set(mteb["tasks"]) == set(suite_rows) and len(suite_rows) == 7
    assert suite_rows["my_pairs"]["examples"] == 100  # both labels: the dev split whole
    for name, row in suite_rows.items():
        print(f"{name} ({row['kind']}, {row['examples']}): suite {row['score']:.8f}, "
              f"mteb {mteb['tasks'][name]['figure']:.8f}")
    print("largest difference:", max(abs(row["score"] - mteb["tasks"][name]["figure"])
                                     for name, row in suite_rows.items()))
    for name, row in suite_rows.items():
        assert row["score"] == pytest.approx(mteb["tasks"][name]["figure"], abs=1e-6), name
