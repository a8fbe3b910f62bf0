"""Issue 51's cases of `mtl encode`, `mtl mine-negatives` and `Encoder`, and its point 3 (every
write that --force may replace is atomic), replayed through the CLI: each refusal is exit 2
and one `error:` line with nothing changed on disk; each fixed result is checked by value.

One tiny BERT run (max_positions 64) serves the module: two contrastive tasks of a user's
own `format: pairs` file that pool differently (my_mean: mean pooling and a query prefix;
my_cls: CLS) and afqmc_sts (CoSENT on 0/1 labels), 2 updates; and its transformers export
(a sentence-transformers folder declaring my_mean's embedding). A full disk is
test_faults_round4_cli's patched `open`; a kill mid-write is a patched `open` that stops
half-way with an exception nothing catches (and, for R5-71, a child process SIGKILLed
half-way through its write).
"""
import builtins
import io
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_faults import DEMO_DATA, REPO, refused, snapshot
from test_faults_commands import refused_late
from test_faults_round4_cli import BERT, full_disk_under, no_temporaries

from mtl_framework import cli
from mtl_framework.embedding.encode import Encoder
from mtl_framework.errors import UserError

SPEC = """\
dataset: my_pairs
format: pairs
files:
  train: my_pairs/train.jsonl
tasks:
  - name: my_mean
    type: contrastive
    max_length: 32
    metric: retrieval
    embedding: {pooling: mean, normalize: false, query_prefix: "查询："}
  - name: my_cls
    type: contrastive
    max_length: 32
    metric: retrieval
  - name: my_untrained
    type: contrastive
    max_length: 32
    metric: retrieval
"""
TEXTS = ["花呗怎么还款", "借呗可以提前还吗", "今天天气很好"]


def afqmc_pairs(count):
    """The first `count` label-1 pairs of the demo's AFQMC train split."""
    pairs = []
    for line in (DEMO_DATA / "afqmc" / "train.txt").read_text(encoding="utf-8").splitlines():
        text, text_b, label = line.split("\t")
        if label == "1" and text != text_b:
            pairs.append((text, text_b))
    return pairs[:count]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("round5_encode")
    data, specs = folder / "data", folder / "specs"
    (data / "my_pairs").mkdir(parents=True)
    (data / "afqmc").symlink_to(DEMO_DATA / "afqmc")
    specs.mkdir()
    (specs / "my_pairs.yaml").write_text(SPEC, encoding="utf-8")
    # each pair both ways: every query is also a passage (the corpus holds the queries)
    records = [{"query": a, "pos": [b]} for text, text_b in afqmc_pairs(20)
               for a, b in ((text, text_b), (text_b, text))]
    (data / "my_pairs" / "train.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    experiment = folder / "experiment.json"
    experiment.write_text(json.dumps({
        "data_root": str(data), "task_specs": [str(specs)], "backbone": BERT,
        "tasks": ["my_mean", "my_cls", "afqmc_sts"], "tasks_per_update": 3, "batch_size": 4,
        "max_length": 32, "steps": 2, "checkpoint_every": 1, "eval_every": 0,
        "precision": "float32", "optimizer": {"name": "adamw", "lr": 0.003},
        "cache_dir": str(folder / "cache")}), encoding="utf-8")
    run, export = folder / "run", folder / "export"
    assert cli.main(["train", str(experiment), "--output", str(run)]) == 0
    assert cli.main(["export", str(run), "--format", "transformers", "--embedding-task",
                     "my_mean", "--output", str(export)]) == 0
    return {"run": run, "export": export, "data": data, "specs": specs, "folder": folder,
            "records": records}


def mine(trained, output, *args, task="my_mean"):
    return ["mine-negatives", trained["run"], "--task", task, "--data-root", trained["data"],
            "--specs", trained["specs"], "--output", output, *args]


def written(path):
    return Path(path).read_bytes()


# --- mtl encode: input lines, outputs, lengths (R5-20, R5-21, R5-26, R5-71, R5-22, R5-24) ---

def test_r5_20_a_blank_line_before_a_text_is_refused_naming_it(trained, tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("花呗怎么还款\n\n借呗可以提前还吗\n \n今天天气很好\n", encoding="utf-8")
    argv = ["encode", trained["run"], "--task", "my_mean", "--input", texts,
            "--output", tmp_path / "v.npy"]
    assert refused(capsys, argv, tmp_path) == (
        f"{texts}:2: a blank line (and 1 more: lines 4): row i of the output is the vector of "
        "line i, and a blank line has no text to encode: remove the blank lines (e.g. "
        "`grep -v '^[[:space:]]*$'`)")
    # blank lines at the end shift no row: row i is still line i
    texts.write_text("\n".join(TEXTS) + "\n\n\n", encoding="utf-8")
    assert cli.main([str(a) for a in argv]) == 0
    expected = Encoder(trained["run"], task="my_mean", log=None).encode(TEXTS)
    np.testing.assert_array_equal(np.load(tmp_path / "v.npy"), expected)
    texts.write_text("\n \n", encoding="utf-8")
    assert refused(capsys, [*argv, "--force"]) == f"--input {texts}: no texts (every line is blank)"


def test_r5_21_encode_never_replaces_a_file_of_the_run(trained, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(trained["run"], run)
    assert (run / "metrics.jsonl").stat().st_size > 0
    assert refused(capsys, ["encode", run, "--task", "my_mean", "--text", "好", "--output",
                            run / "metrics.jsonl", "--force"], run) == (
        f"--output {run / 'metrics.jsonl'}: a file of {run}, which the vectors would replace: "
        "write them outside it")


@pytest.mark.parametrize("kind", [".npy", ".jsonl"])
def test_r5_26_encode_force_on_a_full_disk_leaves_the_old_file_whole(trained, tmp_path, capsys,
                                                                    monkeypatch, kind):
    out = tmp_path / "out" / f"v{kind}"
    out.parent.mkdir()
    encode = ["encode", trained["run"], "--task", "my_mean", "--output", out, "--force"]
    assert cli.main([str(a) for a in [*encode, "--text", TEXTS[0]]]) == 0
    before = written(out)
    full_disk_under(monkeypatch, out.parent)
    message = refused_late(capsys, [*encode, "--text", TEXTS[1], "--text", TEXTS[2]], out.parent)
    assert message == (f"{out}: could not be written (No space left on device); it is as it "
                       "was: free space or write elsewhere")
    assert written(out) == before and no_temporaries(out.parent) == []


KILL_MID_WRITE = """
import builtins, os, signal, sys
real_open = builtins.open
def killing_open(file, mode="r", *args, **kwargs):
    opened = real_open(file, mode, *args, **kwargs)
    if "w" in mode and os.path.basename(str(file)).startswith(sys.argv[1]):
        write = opened.write
        def half_then_killed(text):
            write(text[: len(text) // 2])
            opened.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        opened.write = half_then_killed
    return opened
builtins.open = killing_open
from mtl_framework import cli
sys.exit(cli.main(sys.argv[2:]))
"""


def test_r5_71_sigkill_during_encode_force_leaves_the_old_jsonl_whole(trained, tmp_path, capsys):
    out = tmp_path / "v.jsonl"
    encode = ["encode", str(trained["run"]), "--task", "my_mean", "--output", str(out), "--force"]
    assert cli.main([*encode, "--text", TEXTS[0]]) == 0
    before = written(out)
    done = subprocess.run([sys.executable, "-c", KILL_MID_WRITE, "v.jsonl", *encode, "--text",
                           TEXTS[1], "--text", TEXTS[2]], cwd=REPO, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert written(out) == before  # whole: the half-written file was the one beside it
    assert cli.main([*encode, "--text", TEXTS[1]]) == 0  # what the kill left blocks nothing
    assert [json.loads(line)["text"] for line in out.read_text().splitlines()] == [TEXTS[1]]


def test_r5_22_r5_24_a_length_past_the_position_table_is_one_line(trained, tmp_path, capsys):
    for model in (trained["run"], trained["export"]):
        assert refused(capsys, ["encode", model, "--text", "好", "--max-length", "128"],
                       model) == (
            f"--max-length 128: longer than the backbone's max_positions 64 ({model}: its "
            "learned position table has no rows past it): give --max-length 64 or less")
    folder = tmp_path / "export"
    shutil.copytree(trained["export"], folder)
    config = folder / "sentence_bert_config.json"
    config.write_text(json.dumps({"max_seq_length": 512, "do_lower_case": False}))
    assert refused(capsys, ["encode", folder, "--text", "好"], folder) == (
        f"{config}: max_seq_length 512 is longer than the backbone's max_positions 64 (its "
        "learned position table has no rows past it): give --max-length 64 or less, or set "
        "max_seq_length to 64 there")
    capsys.readouterr()
    assert cli.main(["encode", str(folder), "--text", "好", "--max-length", "64"]) == 0
    vector = json.loads(capsys.readouterr().out)["embedding"]
    assert len(vector) == BERT["hidden_size"] and np.isfinite(vector).all()


# --- Encoder (R5-61, R5-60) ----------------------------------------------------------------

def test_r5_61_a_length_with_no_room_for_a_text_is_refused(trained):
    for length in (-5, 0, 1, 2, True, 8.0, "16"):
        with pytest.raises(UserError, match=rf"^max_length {length!r}: tokens per text, \[CLS\] "
                                            r"and \[SEP\] included, so a whole number >= 3"):
            Encoder(trained["run"], task="my_mean", log=None, max_length=length)
    # the shortest length keeps one token of each text: the vectors differ
    vectors = Encoder(trained["run"], task="my_cls", log=None, max_length=3).encode(
        ["花", "借", "还"])
    assert len({v.tobytes() for v in vectors}) == 3


def test_r5_60_a_str_is_one_text_and_one_vector(trained):
    encoder = Encoder(trained["run"], task="my_mean", log=None)
    vector = encoder.encode("花呗怎么还款")
    assert vector.shape == (BERT["hidden_size"],)
    np.testing.assert_array_equal(vector, encoder.encode(["花呗怎么还款"])[0])


# --- mtl mine-negatives (R5-35, R5-37, R5-31, R5-32, R5-30, R5-33, R5-34, R5-36, R5-39) -------

def test_r5_35_mining_never_writes_over_the_files_it_reads(trained, tmp_path, capsys):
    train = trained["data"] / "my_pairs" / "train.jsonl"
    corpus = tmp_path / "corpus.jsonl"  # passages, one a line, named as the output may be
    corpus.write_text("花呗\n借呗\n", encoding="utf-8")
    before = snapshot(trained["data"] / "my_pairs")
    assert refused(capsys, mine(trained, train, "--force")) == (
        f"--output {train}: is the input {train}: write the negatives to another file")
    assert refused(capsys, mine(trained, corpus, "--corpus", corpus, "--force"), tmp_path) == (
        f"--output {corpus}: is the input {corpus}: write the negatives to another file")
    assert snapshot(trained["data"] / "my_pairs") == before


def test_r5_37_mining_on_a_full_disk_leaves_no_temporary(trained, tmp_path, capsys,
                                                         monkeypatch):
    out = tmp_path / "out" / "neg.jsonl"
    out.parent.mkdir()
    out.write_text("earlier negatives\n", encoding="utf-8")
    full_disk_under(monkeypatch, out.parent)
    message = refused_late(capsys, mine(trained, out, "--ranks", "0-10", "--negatives", "2",
                                        "--force"), out.parent)
    assert message == (f"{out}: could not be written (No space left on device); it is as it "
                       "was: free space or write elsewhere")
    assert sorted(p.name for p in out.parent.iterdir()) == ["neg.jsonl"]


def test_r5_31_r5_32_a_negative_seed_and_a_gbk_corpus(trained, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main([str(a) for a in mine(trained, tmp_path / "n.jsonl", "--seed", "-1")])
    assert exit_.value.code == 2
    assert "argument --seed: must be >= 0, got -1" in capsys.readouterr().err
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes("花呗\n".encode() + "借呗还款\n".encode("gbk"))
    assert refused(capsys, mine(trained, tmp_path / "n.jsonl", "--corpus", corpus),
                   tmp_path) == (
        f"{corpus}:2: --corpus: not UTF-8 (byte 0x{'借'.encode('gbk')[0]:02x} at byte offset 7): "
        "convert it, e.g. `iconv -f GBK -t UTF-8`")


def test_r5_30_a_scored_task_mines_its_positive_pairs_only(trained, tmp_path, capsys):
    out = tmp_path / "n.jsonl"
    capsys.readouterr()
    assert cli.main([str(a) for a in mine(trained, out, "--split", "dev", "--ranks", "0-10",
                                          "--negatives", "2", task="afqmc_sts")]) == 0
    dev = [line.split("\t") for line in
           (DEMO_DATA / "afqmc" / "dev.txt").read_text(encoding="utf-8").splitlines()]
    positives = {(a, b) for a, b, label in dev if label == "1"}
    below = sum(label == "0" for _, _, label in dev)
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert 0 < below and {(r["query"], p) for r in records for p in r["pos"]} == positives
    assert (f"; {below} pair(s) scored below positive_score 1 left out: not positives"
            in capsys.readouterr().out)


def test_r5_33_a_query_is_never_its_own_negative(trained, tmp_path):
    out = tmp_path / "n.jsonl"
    # 40 passages, each query one of them: every other passage but the query is drawn
    assert cli.main([str(a) for a in mine(trained, out, "--ranks", "0-39", "--negatives",
                                          "38")]) == 0
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    passages = {p for r in trained["records"] for p in r["pos"]}
    assert len(records) == 40 and len(passages) == 40
    for record in records:
        assert record["query"] in passages and len(record["neg"]) == 38
        assert record["query"] not in record["neg"] and not set(record["pos"]) & set(record["neg"])


def test_r5_34_the_task_mined_chooses_among_tasks_that_pool_differently(trained, tmp_path,
                                                                       capsys):
    # encoding without a task is refused: the run's tasks pool differently
    assert refused(capsys, ["encode", trained["run"], "--text", "好"]).endswith(
        "pool or normalise differently: give --task NAME (the task whose settings to use)")
    out = tmp_path / "n.jsonl"
    assert cli.main([str(a) for a in mine(trained, out, "--ranks", "0-5", "--negatives",
                                          "2")]) == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == 40
    assert refused(capsys, mine(trained, tmp_path / "m.jsonl", task="my_untrained"),
                   tmp_path, late=True) == (
        f"{trained['run']}: its contrastive tasks my_mean, my_cls, afqmc_sts pool or normalise "
        "differently and --task my_untrained is none of them: use a model that trained "
        "my_untrained, or one whose tasks agree")


def test_r5_36_r5_39_each_says_what_is_short(trained, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n  \n", encoding="utf-8")
    out = tmp_path / "n.jsonl"
    assert refused(capsys, mine(trained, out, "--corpus", corpus), tmp_path) == (
        f"--corpus {corpus}: no passages (the file is empty or blank): give the passages to "
        "draw negatives from, one per line, or leave --corpus out (the split's own positives)")
    assert refused(capsys, mine(trained, out, "--ranks", "10-12"), tmp_path) == (
        "--ranks 10-12: a window of 2 passages, fewer than --negatives 7: widen it (e.g. "
        "--ranks 10-100) or give --negatives 2")
    corpus.write_text("花呗\n借呗\n还款\n", encoding="utf-8")
    assert refused(capsys, mine(trained, out, "--corpus", corpus), tmp_path, late=True) == (
        f"--ranks 10-100: --corpus {corpus} holds 3 passages, none at rank 10 or past: give "
        "--ranks 0-3, or a larger --corpus")
    # the default corpus (40 positives) reaches rank 38 for each query: 30-45 is short
    capsys.readouterr()
    assert cli.main([str(a) for a in mine(trained, out, "--ranks", "30-45", "--negatives",
                                          "10")]) == 0
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert {len(r["neg"]) for r in records} == {8}  # 40 less its positive and itself: 38
    assert capsys.readouterr().out.strip().endswith(
        "; 40 with fewer: the 40 passages, less each query's own positives and itself, do not "
        "reach rank 44: give a larger --corpus, or --ranks starting lower")


# --- point 3: a write killed half-way leaves the earlier file whole -------------------------

class Killed(BaseException):
    """The process ends here, as at a SIGKILL: nothing catches it (not even `except
    Exception`); what a kill would leave is what the test finds."""


def killed_mid_write(monkeypatch, folder):
    """Every file opened for writing under `folder` from now on (by `open`, or `os.fdopen`
    of a descriptor) writes half of its first write, then the process is 'killed'."""
    real_open, folder = builtins.open, os.path.realpath(folder) + os.sep

    def killing_open(file, mode="r", *args, **kwargs):
        opened = real_open(file, mode, *args, **kwargs)
        name = os.readlink(f"/proc/self/fd/{file}") if isinstance(file, int) else file
        if isinstance(name, (str, os.PathLike)) and any(c in mode for c in "wax") and \
                os.path.realpath(name).startswith(folder):
            write = opened.write

            def half_then_killed(data):
                write(data[: len(data) // 2])
                opened.flush()
                raise Killed

            opened.write = half_then_killed
        return opened

    monkeypatch.setattr(builtins, "open", killing_open)
    monkeypatch.setattr(io, "open", killing_open)  # os.fdopen's


def killed(argv):
    with pytest.raises(Killed):
        cli.main([str(a) for a in argv])


def test_point3_predict_mine_and_encode_killed_mid_write_leave_the_old_file(
        trained, tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    commands = {
        "p.jsonl": ["predict", trained["run"], "--task", "my_mean", "--text", "花呗|||借呗",
                    "--separator", "|||"],
        "n.jsonl": ["mine-negatives", trained["run"], "--task", "my_mean", "--data-root",
                    trained["data"], "--specs", trained["specs"], "--ranks", "0-5",
                    "--negatives", "2"],
        "v.npy": ["encode", trained["run"], "--task", "my_mean", "--text", TEXTS[0]],
    }
    for name, argv in commands.items():
        argv = [*argv, "--output", out / name, "--force"]
        assert cli.main([str(a) for a in argv]) == 0
    before = snapshot(out)
    killed_mid_write(monkeypatch, out)
    for name, argv in commands.items():
        killed([*argv, "--output", out / name, "--force"])
        assert snapshot(out) == before, name  # nothing half-written left beside it either
    monkeypatch.undo()
    assert cli.main([str(a) for a in [*commands["n.jsonl"], "--output", out / "n.jsonl",
                                      "--force"]]) == 0


def test_point3_an_export_killed_mid_write_or_mid_swap_keeps_the_old_one(trained, tmp_path,
                                                                        monkeypatch, capsys):
    out = tmp_path / "export"
    export = ["export", trained["run"], "--format", "keras", "--output", out, "--force"]
    assert cli.main([str(a) for a in export]) == 0
    before = snapshot(out)
    killed_mid_write(monkeypatch, tmp_path)  # the new export is written beside it
    killed(export)
    monkeypatch.undo()
    assert snapshot(out) == before
    # killed between the swap's two renames: the earlier export is aside, put back next time
    real_replace = os.replace

    def killed_at_the_second_rename(source, target):
        if str(target) == str(out) and ".tmp-" in str(source):
            raise Killed
        return real_replace(source, target)

    monkeypatch.setattr(os, "replace", killed_at_the_second_rename)
    killed(export)
    monkeypatch.undo()
    assert not out.exists()
    aside = [p for p in tmp_path.iterdir() if p.name.endswith("-replaced")]
    assert len(aside) == 1 and snapshot(aside[0]) == before
    # the next export puts it back; without --force it is then refused, whole
    assert refused(capsys, export[:-1], late=True).startswith(f"{out}: holds an earlier export")
    assert snapshot(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["export"]


def test_point3_the_finetune_suites_results_are_written_whole(tmp_path, monkeypatch):
    from mtl_framework.transfer import benchmark

    suite = {"path": str(tmp_path / "suite.yaml"), "description": "", "seeds": [0],
             "tasks": [{"name": "tnews"}]}
    row = {"export": "a", "task": "tnews", "seed": 0, "score": 0.5, "start": 0.1, "wall_s": 1.0,
           "metric": "accuracy", "baseline": 0.2, "examples": 10, "settings": {}}
    out = tmp_path / "out"
    out.mkdir()
    quiet = lambda message: None  # noqa: E731
    benchmark.write_results(str(out), suite, ["a"], {"a": str(tmp_path)}, [row], quiet)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.suffix in (".json", ".md")}
    assert json.loads(before["results.json"])["rows"][0]["score"] == 0.5
    killed_mid_write(monkeypatch, out)
    with pytest.raises(Killed):
        benchmark.write_results(str(out), suite, ["a"], {"a": str(tmp_path)},
                                [{**row, "score": 0.9}], quiet)
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.suffix in (".json", ".md")} == \
        before


# --- a sentence-transformers folder's files (R5-25) -----------------------------------------

def test_r5_25_a_damaged_sentence_transformers_file_is_one_line_naming_it(trained, tmp_path,
                                                                         capsys):
    folder = tmp_path / "export"
    shutil.copytree(trained["export"], folder)
    modules = folder / "modules.json"
    pooling = folder / "1_Pooling" / "config.json"
    prompts = folder / "config_sentence_transformers.json"
    damages = {
        modules: lambda text: text[: len(text) // 2],  # cut short, as a failed copy leaves it
        pooling: lambda text: "pooling_mode_cls_token = true\n",  # not JSON
        prompts: lambda text: json.dumps({**json.loads(text), "prompts": ["查询："]}),
    }
    expected = {
        modules: "not valid JSON (",
        pooling: "not valid JSON (Expecting value: line 1 column 1 (char 0)): copy the model's "
                 "file again (or export the folder again)",
        prompts: "prompts is not an object of {name: text}",
    }
    for path, damage in damages.items():
        original = path.read_text(encoding="utf-8")
        path.write_text(damage(original), encoding="utf-8")
        message = refused(capsys, ["encode", folder, "--text", "好"], folder)
        assert message.startswith(f"{path}: {expected[path]}"), message
        path.write_text(original, encoding="utf-8")
    capsys.readouterr()  # the folder whole again: it encodes
    assert cli.main(["encode", str(folder), "--text", "好"]) == 0
    assert len(json.loads(capsys.readouterr().out)["embedding"]) == BERT["hidden_size"]


def test_point3_the_embedding_suites_results_are_written_whole(trained, tmp_path, capsys,
                                                               monkeypatch):
    suite = tmp_path / "suite.yaml"
    suite.write_text("kind: embeddings\ntasks: [afqmc_sts]\nbootstrap: 10\n", encoding="utf-8")
    out = tmp_path / "out"
    argv = ["benchmark", trained["export"], "--suite", suite, "--data-root", DEMO_DATA,
            "--output", out]
    assert cli.main([str(a) for a in argv]) == 0
    before = snapshot(out)
    assert json.loads((out / "results.json").read_text())["rows"][0]["task"] == "afqmc_sts"
    killed_mid_write(monkeypatch, out)
    killed(argv)  # the same suite again: its results written again, killed half-way
    monkeypatch.undo()
    assert snapshot(out) == before


# --- encode input read as training reads it (R5-P29, P31, P57, P58; --text -) --------------

def encode_input(trained, path, out):
    return ["encode", trained["run"], "--task", "my_mean", "--input", path, "--output", out]


def test_p29_p31_a_lone_surrogate_or_a_text_of_dropped_characters_is_refused(trained, tmp_path,
                                                                            capsys):
    records, out = tmp_path / "texts.jsonl", tmp_path / "v.npy"
    records.write_text('{"text": "花呗"}\n{"text": "\\ud83d"}\n', encoding="utf-8")  # P29
    assert refused(capsys, encode_input(trained, records, out), tmp_path) == (
        f"{records}:2: \"text\" holds a lone UTF-16 surrogate ('\\ud83d' at character 0, e.g. "
        "half an emoji), which no UTF-8 text has: escape the whole character (both halves) or "
        "leave it out")
    records.write_text('{"text": "花呗"}\n{"text": "\\u200b\\u200b"}\n', encoding="utf-8")
    assert refused(capsys, encode_input(trained, records, out), tmp_path) == (
        f"{records}:2: \"text\" '\\u200b\\u200b' holds only characters the tokenizer drops "
        "(zero-width, format or control characters): it has no text to encode; give a text "
        "or leave the record out")
    # P31: a line the tokenizer reads as the empty text is refused as a blank line is
    texts = tmp_path / "texts.txt"
    texts.write_text("花呗怎么还款\n\u200b\u200b\n借呗\n\x00\n好\n\u200b\n", encoding="utf-8")
    assert refused(capsys, encode_input(trained, texts, out), tmp_path) == (
        f"{texts}:2: a line of characters the tokenizer drops only ('\\u200b\\u200b') (and 1 "
        "more: lines 4): row i of the output is the vector of line i, and a line that is blank "
        "or holds only zero-width, format or control characters has no text to encode: remove "
        "such lines")
    assert refused(capsys, ["encode", trained["run"], "--task", "my_mean", "--text", "好",
                            "--text", "\x00\u200d"]) == (
        "--text #2 is empty (its characters '\\x00\\u200d' are all ones the tokenizer drops): "
        "give a text (training skips empty texts, so a prediction for one means nothing)")
    assert not out.exists()


@pytest.mark.parametrize("kind", [".txt", ".jsonl"])
def test_p57_p58_a_bom_is_no_part_of_the_text(trained, tmp_path, kind):
    path, out = tmp_path / f"texts{kind}", tmp_path / "v.jsonl"
    lines = TEXTS if kind == ".txt" else [json.dumps({"text": t}) for t in TEXTS]
    path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(lines).encode("utf-8") + b"\r\n")
    assert cli.main([str(a) for a in encode_input(trained, path, out)]) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [row["text"] for row in rows] == TEXTS  # P57: the first without U+FEFF
    expected = Encoder(trained["run"], task="my_mean", log=None).encode(TEXTS)
    np.testing.assert_allclose([row["embedding"] for row in rows], expected, atol=1e-6)


def test_stdin_lines_are_rows_as_input_lines_are(trained, tmp_path, capsys, monkeypatch):
    def encode_stdin(data, *more):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data.encode("utf-8")),
                                                           encoding="utf-8"))
        return ["encode", trained["run"], "--task", "my_mean", "--text", "-", *more]

    assert refused(capsys, encode_stdin("花呗\n\n借呗\n")) == (
        "--text - (stdin):2: a blank line: row i of the output is the vector of line i, and a "
        "blank line has no text to encode: remove the blank lines (e.g. "
        "`grep -v '^[[:space:]]*$'`)")
    out = tmp_path / "v.npy"  # a BOM and blank lines at the end shift no row
    assert cli.main([str(a) for a in encode_stdin("\ufeff" + "\n".join(TEXTS) + "\n\n \n",
                                                  "--output", out)]) == 0
    expected = Encoder(trained["run"], task="my_mean", log=None).encode(TEXTS)
    np.testing.assert_array_equal(np.load(out), expected)


def test_mining_a_task_not_trained_names_the_prefixes_that_differ(trained, tmp_path, capsys):
    # the run's two tasks pool alike and prefix queries differently; the task mined is neither
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "mine.yaml").write_text(
        "dataset: my_pairs\nformat: pairs\nfiles:\n  train: my_pairs/train.jsonl\ntasks:\n"
        + "".join(f"  - name: {name}\n    type: contrastive\n    max_length: 32\n"
                  f"    metric: retrieval\n    embedding: {{query_prefix: \"{prefix}\"}}\n"
                  for name, prefix in (("p_plain", ""), ("p_asked", "问："), ("p_other", "查："))),
        encoding="utf-8")
    experiment = tmp_path / "experiment.json"
    experiment.write_text(json.dumps({
        "data_root": str(trained["data"]), "task_specs": [str(specs)], "backbone": BERT,
        "tasks": ["p_plain", "p_asked"], "batch_size": 4, "max_length": 32, "steps": 1,
        "checkpoint_every": 1, "eval_every": 0, "precision": "float32",
        "cache_dir": str(trained["folder"] / "cache")}), encoding="utf-8")
    run = tmp_path / "run"
    assert cli.main(["train", str(experiment), "--output", str(run)]) == 0
    argv = ["mine-negatives", run, "--data-root", trained["data"], "--specs", specs,
            "--output", tmp_path / "n.jsonl", "--ranks", "0-5", "--negatives", "2"]
    assert refused(capsys, [*argv, "--task", "p_other"], tmp_path, late=True) == (
        f"{run}: its tasks prefix the query differently (p_plain '', p_asked '问：') and --task "
        "p_other is none of them: use a model that trained p_other, or one whose tasks agree")
    assert cli.main([str(a) for a in [*argv, "--task", "p_asked"]]) == 0  # a task it trained
    assert len((tmp_path / "n.jsonl").read_text(encoding="utf-8").splitlines()) == 40
