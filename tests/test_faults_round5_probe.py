"""Issue 51 point 5: our own probe of the embedding surfaces (R5-P01..P50, docs/errors.md),
the cases that failed and were fixed here, replayed through the CLI.

A user's `format: pairs` task (FlagEmbedding rows) beside the demo's tnews, in a spec folder
of the test's own; one tiny BERT run (2 updates) serves the export, predict and encode
cases. The data cases read through `mtl data stats --json` (no model is built).
"""
import gzip
import json

import pytest
import yaml
from test_faults import DEMO_DATA, refused, snapshot

from mtl_framework import cli

BERT = dict(architecture="bert", num_layers=1, hidden_size=32, num_heads=2,
            intermediate_size=64, vocab_size=500, max_positions=64)
PAIRS = [{"query": f"新闻{i}讲了什么", "pos": [f"新闻{i}的内容"], "neg": [f"别的{i}消息"]}
         for i in range(12)]


def pairs_task(folder, rows, raw=None, fields=None, embedding=None):
    """specs/my_pairs.yaml and data/my_pairs/train.jsonl (`rows` as JSON lines, or `raw`
    bytes) under `folder`, tnews linked beside it; (specs folder, data root, train file)."""
    spec = {"dataset": "my_pairs", "format": "pairs", "files": {"train": "my_pairs/train.jsonl"},
            **({"fields": fields} if fields else {}),
            "tasks": [{"name": "my_pairs", "type": "contrastive", "max_length": 24,
                       "metric": "retrieval", **({"embedding": embedding} if embedding else {})}]}
    (folder / "specs").mkdir(parents=True)
    (folder / "specs" / "my_pairs.yaml").write_text(yaml.safe_dump(spec, allow_unicode=True),
                                                    encoding="utf-8")
    data = folder / "data" / "my_pairs" / "train.jsonl"
    data.parent.mkdir(parents=True)
    data.write_bytes(raw if raw is not None else "".join(
        json.dumps(row, ensure_ascii=False) + "\n" for row in rows).encode("utf-8"))
    (folder / "data" / "tnews").symlink_to(DEMO_DATA / "tnews")
    return folder / "specs", folder / "data", data


def stats(capsys, specs, data_root):
    capsys.readouterr()
    code = cli.main(["data", "stats", "my_pairs", "--specs", str(specs), "--data-root",
                     str(data_root), "--split", "train", "--json"])
    return code, json.loads(capsys.readouterr().out)[0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("round5_probe")
    specs, data_root, _ = pairs_task(folder, PAIRS)
    experiment = folder / "experiment.yaml"
    experiment.write_text(yaml.safe_dump({
        "data_root": str(data_root), "task_specs": [str(specs)], "cache_dir": str(folder / "cache"),
        "backbone": BERT, "tasks": ["tnews", "my_pairs"], "tasks_per_update": 2,
        "batch_size": 4, "max_length": 24, "steps": 2, "checkpoint_every": 1, "eval_every": 0,
        "precision": "float32"}), encoding="utf-8")
    run = folder / "run"
    assert cli.main(["train", str(experiment), "--output", str(run)]) == 0
    return {"folder": folder, "run": run, "specs": specs}


# --- the pairs file (P03, P04, P40, P42, P43) ---------------------------------------------

def test_p03_p04_p40_blank_texts_and_bad_scores_are_counted_as_what_they_are(tmp_path, capsys):
    rows = [{"query": "一", "pos": ["甲", ""], "neg": ["", "乙", "  "], "s": 1},   # 1: kept
            {"query": "二", "pos": [], "s": 1},                                   # 2: empty
            {"query": "三", "pos": ["丙"], "neg": "   ", "s": "high"},             # 3: score
            {"query": "四", "pos": ["丁"], "s": True},                             # 4: score
            {"query": "五", "pos": "戊", "s": "0.5"}]                               # 5: kept
    specs, data_root, path = pairs_task(tmp_path, rows, fields={"score": "s"},
                                        embedding={"loss": "cosent"})
    code, row = stats(capsys, specs, data_root)
    assert code == 0 and (row["examples"], row["skipped_total"]) == (2, 3)
    assert {reason: entry["first"] for reason, entry in row["skipped"].items()} == {
        "positive ('pos') empty (no text that is not blank)": [f"{path}:2"],
        "score ('s') not a finite number: 'high'": [f"{path}:3"],
        "score ('s') not a finite number: True": [f"{path}:4"]}
    # the blank positive and the two blank negatives of row 1: left out, counted at its line
    # (row 3's blank negative is not counted: the row itself was skipped for its score)
    assert row["filtered"] == {"blank text in the row's positives (left out)": 1,
                               "blank text in the row's negatives (left out)": 2}
    assert row["filtered_places"] == {"blank text in the row's positives (left out)": [f"{path}:1"],
                                      "blank text in the row's negatives (left out)": [f"{path}:1"]}


@pytest.mark.parametrize("case", ["gbk", "gzip"])
def test_p42_p43_a_gbk_or_gzip_pairs_file_says_the_fix_that_works(tmp_path, capsys, case):
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in PAIRS)
    raw = text.encode("gbk") if case == "gbk" else gzip.compress(text.encode("utf-8"))
    specs, data_root, path = pairs_task(tmp_path, None, raw=raw)
    code, row = stats(capsys, specs, data_root)
    assert code == 0 and row["examples"] == 0
    if case == "gzip":  # one reason at line 1, not every line undecodable
        assert row["skipped"] == {"the file is gzip-compressed: decompress it (gunzip) and point "
                                  "the spec at the result": {"count": 1, "first": [f"{path}:1"]}}
    else:  # `options.encoding`, the fix it used to name, is no option of a JSON format
        assert row["skipped_total"] == len(PAIRS) and all(
            reason.endswith("; this format reads UTF-8: convert the file, e.g. "
                            "`iconv -f GBK -t UTF-8`") for reason in row["skipped"])
    before = snapshot(tmp_path / "specs")
    (tmp_path / "specs" / "my_pairs.yaml").write_text(
        (tmp_path / "specs" / "my_pairs.yaml").read_text(encoding="utf-8")
        + "options: {encoding: gbk}\n", encoding="utf-8")
    assert snapshot(tmp_path / "specs") != before  # the old advice: refused, as it should be
    assert refused(capsys, ["tasks", "validate", tmp_path / "specs"]).endswith(
        "unknown option 'encoding' for format 'pairs'; allowed: none (format 'pairs' takes no "
        "options)")


# --- export --output (P25, P26) -------------------------------------------------------------

def test_p25_a_folder_that_is_no_export_is_refused_without_offering_force(trained, tmp_path,
                                                                          capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep\n", encoding="utf-8")
    export = ["export", trained["run"], "--format", "transformers", "--output"]
    for force in ([], ["--force"]):  # the same line: --force would not help, so not offered
        assert refused(capsys, [*export, mine, *force], mine) == (
            f"{mine}: not wholly an earlier export (no export-manifest.json, so not an export "
            "of `mtl export`), and --force replaces only that: give --output a new or empty "
            "folder")
    assert refused(capsys, [*export, trained["run"]], trained["run"]) == (
        f"{trained['run']}: holds the run directory {trained['run']}, which --force would "
        "delete: give --output a folder outside the run")
    ours = tmp_path / "ours"
    assert cli.main([str(a) for a in [*export, ours]]) == 0
    entries = sorted(p.name for p in ours.iterdir())
    assert refused(capsys, [*export, ours], ours) == (
        f"{ours}: holds an earlier export ({len(entries)} entries, e.g. {entries[0]}): pass "
        "--force to replace it with this export, or give --output a new folder")
    assert cli.main([str(a) for a in [*export, ours, "--force"]]) == 0


def test_p26_an_output_under_a_file_says_the_file_is_no_folder(trained, tmp_path, capsys):
    (tmp_path / "afile").write_text("x\n", encoding="utf-8")
    assert refused(capsys, ["export", trained["run"], "--format", "keras", "--output",
                            tmp_path / "afile" / "sub"], tmp_path) == (
        f"--output {tmp_path / 'afile' / 'sub'}: {tmp_path / 'afile'} is a file, not a folder: "
        "give another path")


# --- predict and encode (P28, P30) ------------------------------------------------------------

def test_p28_each_line_of_a_pairs_row_names_the_positive_it_scored(trained, tmp_path, capsys):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in [
        {"query": "新闻1讲了什么", "pos": ["新闻1的内容", "别的2消息"]},
        {"query": "没有正例"},
        {"query": "新闻3讲了什么", "pos": "新闻3的内容"}]) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert cli.main(["predict", str(trained["run"]), "--task", "my_pairs", "--input", str(rows),
                     "--output", str(out)]) == 0
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [line["prediction"] and line["prediction"]["positive"] for line in lines] == \
        ["新闻1的内容", "别的2消息", None, "新闻3的内容"]  # row 1's two pairs, told apart
    assert all(-1 <= line["prediction"]["cosine"] <= 1 for line in lines if line["prediction"])
    assert lines[2]["error"].endswith(f"at {rows}:2")


def test_p30_encode_names_its_text_flag_not_predict(trained, capsys, monkeypatch):
    argument = "好".encode("gbk").decode("utf-8", "surrogateescape")  # argv bytes, not UTF-8
    assert refused(capsys, ["encode", trained["run"], "--text", "新闻", "--text", argument],
                   trained["run"]) == (
        f"--text #2: not UTF-8 (byte 0x{'好'.encode('gbk')[0]:02x} at byte offset 0, line 1): "
        "convert it, e.g. `iconv -f GBK -t UTF-8`")


def test_p51_an_experiment_without_an_optimizer_trains(trained):
    """The module's run names no `optimizer:` (the defaults): the not-learning check read
    `experiment.optimizer` and ended every such `mtl train` in AttributeError."""
    experiment = yaml.safe_load((trained["folder"] / "experiment.yaml").read_text(encoding="utf-8"))
    assert "optimizer" not in experiment
    assert sorted(p.name for p in (trained["run"] / "checkpoints").iterdir()) == \
        ["step-00000001", "step-00000002"]


def test_p53_rows_the_featurizer_leaves_out_are_named_in_the_no_rows_line(tmp_path, capsys):
    """AFQMC's 0/1 pairs under InfoNCE with `positive_score: 2`: every row is read, and the
    featurizer leaves each out (no positive pair); the line used to say only `400 examples
    read`. (The same for a contrastive task on rows without a text_b.)"""
    spec = tmp_path / "specs" / "one_text.yaml"
    spec.parent.mkdir()
    spec.write_text("dataset: one_text\nformat: delimited\nfiles: {train: afqmc/train.txt}\n"
                    "options: {delimiter: \"\\t\"}\nfields: {text: 0, text_b: 1, label: 2}\n"
                    "tasks:\n"
                    "  - name: one_text_sts\n    type: contrastive\n    max_length: 24\n"
                    "    metric: pair_classification\n    embedding: {positive_score: 2}\n",
                    encoding="utf-8")
    experiment = tmp_path / "experiment.yaml"
    experiment.write_text(yaml.safe_dump({
        "data_root": str(DEMO_DATA), "task_specs": [str(spec.parent)], "backbone": BERT,
        "cache_dir": str(tmp_path / "cache"), "tasks": ["one_text_sts"], "steps": 1,
        "max_length": 24}),
        encoding="utf-8")
    assert refused(capsys, ["train", experiment, "--output", tmp_path / "run"], late=True) == (
        f"{spec}:7: task 'one_text_sts' has no usable train rows (400 examples read; left out "
        "by the featurizer: score below positive_score (not a positive pair): 400): fix its train "
        f"file ({DEMO_DATA / 'afqmc' / 'train.txt'}) or leave the task out")
    assert not (tmp_path / "run").exists()


def pairs_experiment(folder, specs, data_root, steps):
    """folder/experiment.yaml: the pairs task alone on the tiny BERT, a checkpoint an update."""
    experiment = folder / "experiment.yaml"
    experiment.write_text(yaml.safe_dump({
        "data_root": str(data_root), "task_specs": [str(specs)], "cache_dir": str(folder / "c"),
        "backbone": BERT, "tasks": ["my_pairs"], "batch_size": 4, "max_length": 24,
        "steps": steps, "checkpoint_every": 1, "eval_every": 0, "precision": "float32"}),
        encoding="utf-8")
    return experiment


def test_p08_train_names_the_skipped_rows_count_reason_and_first_line(tmp_path, capsys):
    rows = PAIRS + [{"query": "空正例", "pos": []}, {"query": "坏", "pos": ["文本", 5]},
                    {"query": 123, "pos": ["数字"]}]
    specs, data_root, path = pairs_task(tmp_path, rows)
    experiment = pairs_experiment(tmp_path, specs, data_root, steps=1)
    assert cli.main(["train", str(experiment), "--output", str(tmp_path / "run")]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "skipped" in line]
    assert lines == [
        f"my_pairs: skipped 3 of 15 train rows: positive ('pos') empty (no text that is not "
        f"blank): 1 (e.g. {path}:13); positive ('pos') missing or not a string or list of "
        f"strings: 1 (e.g. {path}:14); and 1 other reason(s) (`mtl data stats my_pairs "
        f"--split train` lists them)"]


def test_a_resume_falling_back_past_a_damaged_checkpoint_checks_the_one_it_uses(tmp_path, capsys):
    """The newest checkpoint's trainer.json is unreadable, so the run's check had only
    experiment.yaml to compare; the older checkpoint it resumes from records max_length 24,
    and the spec now says 20: refused naming that checkpoint, nothing moved aside."""
    specs, data_root, _ = pairs_task(tmp_path, PAIRS)
    experiment = pairs_experiment(tmp_path, specs, data_root, steps=2)
    run = tmp_path / "run"
    assert cli.main(["train", str(experiment), "--output", str(run)]) == 0
    newest, older = (run / "checkpoints" / f"step-0000000{n}" for n in (2, 1))
    (newest / "trainer.json").write_text("{", encoding="utf-8")  # a cut write
    spec = specs / "my_pairs.yaml"
    spec.write_text(spec.read_text(encoding="utf-8").replace("max_length: 24", "max_length: 20"),
                    encoding="utf-8")
    before = snapshot(run)
    capsys.readouterr()
    assert cli.main(["train", str(experiment), "--output", str(run), "--resume", "--set",
                     "steps=3"]) == 2
    error = capsys.readouterr().err
    assert (f"task 'my_pairs': max_length is 20, the run trained with 24 ({older}/trainer.json)"
            in error)
    assert snapshot(run) == before
