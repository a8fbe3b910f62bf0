"""Issue 35's cases (the third round of hostile use), replayed through the CLI: each ends
in exit 2 and one `error:` line with the run directory and the user's files hashing the
same before and after, or comes out right (nothing lost, nothing read wrong).

One tiny run (tnews from a copy of the demo data, 2 updates) serves the module; cases that
damage something copy it first. Subprocesses only where a real process is the point
(SIGTERM, a closed pipe, permissions seen by a user who is not root).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from test_faults import DEMO_DATA, REPO, experiment, line_of, refused, snapshot, write
from test_faults_commands import refused_late

from data_adapters import ReadReport, get_adapter, read_files
from mtl_framework import cli
from mtl_framework.config.registry import LabelFileError, load_registry, read_label_file
from mtl_framework.errors import UserError
from mtl_framework.prepare import cache
from mtl_framework.rundir import RunDir
from mtl_framework.rundir.lock import RunLock
from mtl_framework.saving import model_card
from mtl_framework.transfer.benchmark import load_suite


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("round3")
    data = folder / "data"
    shutil.copytree(DEMO_DATA / "tnews", data / "tnews")
    path = experiment(folder, "base.yaml", data_root=str(data), cache_dir=str(folder / "cache"))
    run = folder / "run"
    assert cli.main(["train", str(path), "--output", str(run)]) == 0
    return {"experiment": path, "run": run, "data": data, "folder": folder}


def copy_run(trained, tmp_path, name="run"):
    target = tmp_path / name
    shutil.copytree(trained["run"], target)
    return target


def relabel_in_place(path):
    """Swap two labels of equal length in every row, keep the size and restore the
    modification time (as `cp -p`, `rsync -t` and `tar -x` do)."""
    stat = os.stat(path)
    text = Path(path).read_text(encoding="utf-8")
    swapped = text.replace('"news_edu"', '"@@@"').replace('"news_car"', '"news_edu"').replace(
        '"@@@"', '"news_car"')
    assert swapped != text and len(swapped.encode()) == stat.st_size
    Path(path).write_text(swapped, encoding="utf-8")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


# --- lose a user's files (1-3) and outputs checked before the work ---------------------------

def test_vocab_build_never_replaces_a_file_without_force(trained, tmp_path, capsys):
    vocab = copy_run(trained, tmp_path) / "vocab.txt"
    before = snapshot(vocab.parent)
    text = write(tmp_path / "t.txt", "新的文字\n")
    message = refused(capsys, ["vocab", "build", "--text", text, "--output", vocab], vocab.parent)
    assert message.startswith(f"--output {vocab}: exists") and "--force" in message
    assert snapshot(vocab.parent) == before
    assert cli.main(["vocab", "build", "--text", str(text), "--output", str(vocab),
                     "--force"]) == 0
    assert "新" in vocab.read_text(encoding="utf-8")


def test_train_and_finetune_refuse_a_folder_that_holds_no_run(trained, tmp_path, capsys):
    mine = tmp_path / "mine"
    write(mine / "vocab.txt", "my own\n")
    write(mine / "evaluations.jsonl", '{"mine": 1}\n')
    message = refused(capsys, ["train", trained["experiment"], "--output", mine], mine)
    assert message.startswith(f"{mine}: holds evaluations.jsonl, vocab.txt but no run")
    message = refused(capsys, ["finetune", trained["folder"], "tnews", "--data-root",
                               trained["data"], "--output", mine], mine)
    assert "but no run" in message or "no config" in message or "not" in message


def test_train_output_under_a_file_is_refused_before_any_work(trained, tmp_path, capsys):
    write(tmp_path / "afile", "x\n")
    message = refused(capsys, ["train", trained["experiment"], "--output",
                               tmp_path / "afile" / "run"])
    assert message.startswith(f"--output {tmp_path / 'afile' / 'run'}: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_train_into_a_read_only_run_folder_is_refused_before_any_work(trained, tmp_path,
                                                                      capsys):
    run = copy_run(trained, tmp_path)
    run.chmod(0o555)
    try:
        message = refused(capsys, ["train", trained["experiment"], "--output", run,
                                   "--resume", "--set", "steps=3"], run)
        assert "not writable" in message
    finally:
        run.chmod(0o755)


def test_report_keeps_a_users_png_unless_forced(trained, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "pictures"
    write(out / "loss.png", "my holiday photo")
    message = refused(capsys, ["report", trained["run"], "--output", out], out)
    assert message == (f"--output {out}: already holds loss.png: pass --force to replace them, "
                       "or another --output")
    assert cli.main(["report", str(trained["run"]), "--output", str(out), "--force"]) == 0
    assert (out / "loss.png").read_bytes().startswith(b"\x89PNG")


# --- silently wrong (4-11) ------------------------------------------------------------------

def test_the_cache_key_is_the_content_and_a_resume_on_edited_rows_is_refused(
        trained, tmp_path, capsys):
    data = tmp_path / "data"
    shutil.copytree(trained["data"], data)
    task = load_registry().select(["tnews"])[0]
    before = cache.data_files(task, "train", data)
    relabel_in_place(data / "tnews" / "train.json")
    after = cache.data_files(task, "train", data)
    assert before[0][:2] == after[0][:2] and before[0][2] != after[0][2]  # same size, new key
    # a resume over the relabelled rows (same count, same size, same mtime): one line
    run = copy_run(trained, tmp_path)
    resumed = experiment(tmp_path, "resumed.yaml", data_root=str(data),
                         cache_dir=str(trained["folder"] / "cache"))
    before_run = snapshot(run)
    capsys.readouterr()
    assert cli.main(["train", str(resumed), "--output", str(run), "--resume", "--set",
                     "steps=3"]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert "Traceback" not in err and len(errors) == 1, err
    assert "its train files' content differs from what the run trained on" in errors[0]
    assert snapshot(run) == before_run


def test_a_vocab_line_given_twice_is_refused_with_its_line(trained, tmp_path, capsys):
    lines = (trained["run"] / "vocab.txt").read_text(encoding="utf-8").splitlines()
    vocab = write(tmp_path / "vocab.txt", "\n".join(lines[:10] + [lines[7]] + lines[10:]) + "\n")
    path = experiment(tmp_path, backbone={"num_layers": 1, "hidden_size": 32, "num_heads": 2,
                                          "vocab": str(vocab)},
                      data_root=str(trained["data"]))
    message = refused(capsys, ["train", path, "--output", tmp_path / "run"])
    assert f"{vocab}:11: token {lines[7]!r} given twice (first on line 8)" in message
    assert not (tmp_path / "run").exists()
    for text, expected in (("\ufeff[PAD]\n", ":1: starts with a byte-order mark"),
                           ("[PAD]\r[UNK]\r", ":1: lines end in a lone CR")):
        bad = write(tmp_path / "bad.txt", text)
        path = experiment(tmp_path, backbone={"num_layers": 1, "hidden_size": 32,
                                              "num_heads": 2, "vocab": str(bad)})
        assert expected in refused(capsys, ["train", path, "--output", tmp_path / "run"])


def test_the_model_card_ignores_a_smoke_evaluation(trained, tmp_path, capsys):
    run = copy_run(trained, tmp_path)
    assert cli.main(["evaluate", str(run)]) == 0
    assert cli.main(["evaluate", str(run), "--max-examples", "8", "--tasks", "tnews"]) == 0
    lines = RunDir(run).read_evaluations()
    assert lines[-1]["max_examples"] == 8 and lines[-1]["tasks_asked"] == ["tnews"]
    chosen = model_card.last_dev_evaluation(run)
    assert chosen == lines[-2] and chosen["tasks"]["tnews"]["examples"] == 300


def test_no_lock_file_is_left_and_the_directory_lock_refuses_a_second_writer(
        trained, tmp_path, capsys):
    run = copy_run(trained, tmp_path)
    assert not (run / "train.lock").exists()  # nothing a user could delete, nothing stale
    lock = RunLock(str(run))  # a second open file description: flock conflicts
    try:
        message = refused(capsys, ["train", trained["experiment"], "--output", run, "--resume",
                                   "--set", "steps=3"], run)
        assert f"another `mtl train` (pid {os.getpid()}) is writing this run directory" in message
    finally:
        lock.release()


def test_a_resume_with_nothing_to_do_writes_nothing(trained, tmp_path, capsys):
    run = copy_run(trained, tmp_path)
    before = snapshot(run)
    capsys.readouterr()
    assert cli.main(["train", str(trained["experiment"]), "--output", str(run), "--resume",
                     "--set", "steps=1"]) == 0
    assert "nothing to do: the run already has 2 of 1 steps" in capsys.readouterr().out
    assert snapshot(run) == before


def test_rope_factors_must_be_finite_and_sensible(tmp_path, capsys):
    for factor in ("linear:inf", "ntk:1e308", "linear:nan", "dynamic_ntk:2000:64"):
        message = refused(capsys, ["finetune", tmp_path, "tnews", "--rope-scaling", factor])
        assert "factor must be a finite number from 1 to 1024" in message, factor


def test_corpus_folders_follow_symlinks_and_count_loops_fifos_and_other_encodings(tmp_path):
    corpus, elsewhere = tmp_path / "corpus", tmp_path / "elsewhere"
    write(corpus / "a.txt", "一\n二\n")
    write(elsewhere / "b.txt", "三\n")
    (corpus / "linked").symlink_to(elsewhere, target_is_directory=True)
    (corpus / "loop").symlink_to(corpus, target_is_directory=True)
    os.mkfifo(corpus / "pipe.txt")
    (corpus / "gbk.txt").write_bytes("四\n".encode("gbk") + "五\n".encode("utf-8"))
    (corpus / "dangling.txt").symlink_to(tmp_path / "gone.txt")
    report = ReadReport()
    texts = [e.text for e in read_files("text_lines", [str(corpus)], {}, {}, "mlm", None, report)]
    assert sorted(texts) == ["一", "三", "二", "五"]
    reasons = dict(report.skipped)
    assert reasons["not a regular file (a FIFO, socket or device)"] == 1
    assert reasons["folder already read (a symlink loop)"] == 1
    assert sum(n for r, n in reasons.items() if r.startswith("line is not valid utf-8")) == 1
    assert sum(n for r, n in reasons.items() if r.startswith("file cannot be read")) == 1


# --- hangs (13-15) ----------------------------------------------------------------------------

def test_yaml_alias_bombs_and_recursive_aliases_are_refused_at_once(tmp_path, capsys):
    names = "abcdefghij"
    bomb = "x: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"{names[i + 1]}: &{names[i + 1]} [{', '.join(['*' + names[i]] * 10)}]\n"
        for i in range(8)) + "tasks: [tnews]\n"
    path = write(tmp_path / "bomb.yaml", bomb)
    message = refused(capsys, ["train", path])
    assert message.startswith(f"{path}:1: YAML aliases expand this document to ")
    path = write(tmp_path / "loop.yaml", "tasks: &t [tnews, *t]\n")
    assert refused(capsys, ["train", path]) == (
        f"{path}:1: YAML alias refers to a node that contains it (a recursive alias): write "
        "the value out instead")


def test_a_late_duplicate_among_200000_labels_is_found_in_one_pass(tmp_path):
    labels = [f"label{i}" for i in range(200_000)] + ["label7"]
    path = write(tmp_path / "labels.txt", "\n".join(labels) + "\n")
    with pytest.raises(LabelFileError, match=r"lists 'label7' twice \(entries 8 and 200001\)"):
        read_label_file(path)


# --- tracebacks that are one line now --------------------------------------------------------

def test_experiment_values_that_used_to_end_in_a_traceback(trained, tmp_path, capsys):
    base = trained["experiment"]
    assert "seed must be <= 4294967295" in refused(capsys, ["train", base, "--set",
                                                             "seed=4294967296"])
    message = refused(capsys, ["train", base, "--set", "tasks.².rate=0.5"])
    assert message.startswith("--set tasks.².rate=0.5: tasks is a list of 1")
    # extends: a folder, and a chain of 100 files
    path = write(tmp_path / "x.yaml", {"extends": "folder", "tasks": ["tnews"]})
    (tmp_path / "folder").mkdir()
    assert "is a folder; name the experiment file in it" in refused(capsys, ["train", path])
    for i in range(100):
        write(tmp_path / f"c{i}.yaml", {"extends": f"c{i + 1}.yaml"} if i < 99 else
              {"tasks": ["tnews"]})
    assert "the chain of `extends` is longer than 64 files" in refused(
        capsys, ["train", tmp_path / "c0.yaml"])


def test_seeds_past_32_bits_are_refused_before_any_work(tmp_path, capsys):
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:  # argparse: a usage error, exit 2
        cli.main(["finetune", str(tmp_path), "tnews", "--seed", str(2**32)])
    assert stop.value.code == 2
    assert "must be <= 4294967295" in capsys.readouterr().err
    suite = write(tmp_path / "suite.yaml", {"tasks": ["tnews"], "seeds": [0, 2**32]})
    with pytest.raises(UserError, match="seeds must be a non-empty list of integers from 0 "
                                        "to 2\\^32 - 1"):
        load_suite(str(suite), load_registry())  # before any export is read or seed run


def test_spec_options_that_used_to_end_in_a_traceback(tmp_path, capsys):
    for options, expected in (({"delimiter": ""}, "option 'delimiter' of format 'delimited' is empty"),
                              ({"encoding": "gbkk"}, "is 'gbkk', no encoding Python knows")):
        specs = tmp_path / "specs"
        shutil.rmtree(specs, ignore_errors=True)
        write(specs / "mine.yaml", {
            "dataset": "mine", "format": "delimited", "files": {"train": "mine/train.tsv"},
            "fields": {"text": 0, "label": 1}, "options": options, "tasks": [{
                "name": "mine", "type": "classification", "labels": ["a", "b"],
                "max_length": 32, "metric": "accuracy"}]})
        capsys.readouterr()
        code = cli.main(["tasks", "validate", str(specs)])
        out = capsys.readouterr()
        assert code == 2 and "Traceback" not in out.err
        assert expected in out.out + out.err, out


def test_a_lone_surrogate_row_is_skipped_and_counted(tmp_path):
    path = write(tmp_path / "rows.json", "".join(
        f'{{"sentence": "{text}", "keywords": "", "label_desc": "news_edu"}}\n'
        for text in ("好", "半个\\ud83d", "整个\\ud83d\\ude00")))
    report = ReadReport()
    task = load_registry().select(["tnews"])[0]
    rows = list(read_files(task.format, [str(path)], task.options, task.fields, task.type,
                           task.labels, report))
    assert [r.text for r in rows] == ["好", "整个😀"]
    assert [(reason, n) for reason, n in report.skipped.items()] == [
        ("a lone UTF-16 surrogate (\\ud800-\\udfff escape without its pair, e.g. half an "
         "emoji)", 1)]


def test_set_paths_are_relative_to_the_current_folder(trained, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(trained["folder"])
    capsys.readouterr()
    assert cli.main(["train", str(trained["experiment"]), "--set", "data_root=data",
                     "--print-config"]) == 0
    resolved = yaml.safe_load(capsys.readouterr().out)
    assert resolved["data_root"] == str(trained["data"])


# --- data read right ---------------------------------------------------------------------------

def test_nested_relation_arguments_move_outside_and_duplicates_are_kept_once(tmp_path):
    rows = ["友达\t友达光电\t合作\t友达光电与友达签约",  # head inside tail, a standalone 友达 later
            "友达\t友达光电\t合作\t友达光电与友达签约",  # the same triple again (merged by text)
            "光电\t友达光电\t合作\t友达光电大会"]  # no standalone 光电: kept nested, counted
    path = write(tmp_path / "train.txt", "\n".join(rows) + "\n")
    report = ReadReport()
    examples = list(get_adapter("entity_pair_tsv")().read(
        [str(path)], {"delimiter": "\t", "encoding": "utf-8", "no_relation": None},
        {"head": 0, "tail": 1, "label": 2, "text": 3}, "extraction_relation", None, report))
    first, second = examples
    (triple,) = first.triples
    assert (triple.subject.start, triple.subject.end) == (5, 7)  # 友达光电与[友达]签约
    assert (triple.object.start, triple.object.end) == (0, 4)
    assert dict(report.filtered) == {"duplicate triple of the same text (kept once)": 1}
    assert dict(report.repaired) == {
        "head placed at a later occurrence, outside the tail that holds its first": 2,
        "head inside the tail: the text has no occurrence outside it (kept nested)": 1}
    assert (second.triples[0].subject.start, second.triples[0].subject.end) == (2, 4)


def test_cjrc_span_and_classification_tasks_share_one_rule(tmp_path):
    context = "原告要求被告赔偿一万元。"
    qas = [{"id": "u", "question": "无答案?", "answers": [{"text": "", "answer_start": -1}]},
           {"id": "y", "question": "是否?", "answers": [{"text": "YES", "answer_start": -1}]},
           {"id": "s", "question": "多少?", "answers": [{"text": "一万元", "answer_start": 8}]}]
    path = write(tmp_path / "cjrc.json", json.dumps(
        {"data": [{"paragraphs": [{"context": context, "qas": qas}]}]}, ensure_ascii=False))
    adapter = get_adapter("squad")()
    options = {"placeholder_answers": "skip", "scorer": "cjrc", "unlocated_questions": "skip"}
    spans = list(adapter.read([str(path)], options, {}, "mrc_span", None, ReadReport()))
    kinds = list(adapter.read([str(path)], options, {}, "classification",
                              ["span", "YES", "NO", "unknown"], ReadReport()))
    assert [(e.id, [a.text for a in e.answers]) for e in spans] == [("u", []), ("s", ["一万元"])]
    assert [(e.id, e.label) for e in kinds] == [("u", "unknown"), ("y", "YES"), ("s", "span")]


# --- real processes: SIGTERM and a closed pipe -------------------------------------------------

def child_env():
    return {**{k: v for k, v in os.environ.items() if k != "MTL_VERBOSE"},
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def test_a_closed_pipe_ends_quietly(tmp_path):
    read, write_end = os.pipe()
    os.close(read)  # the reader is gone before the first line, as `| head -0` would be
    done = subprocess.run([sys.executable, "-m", "mtl_framework", "tasks", "list"],
                          stdout=write_end, stderr=subprocess.PIPE, env=child_env(),
                          cwd=tmp_path, timeout=300)
    os.close(write_end)
    assert done.returncode == cli.PIPE_CLOSED and done.stderr == b"", done.stderr


def test_sigterm_in_train_is_ctrl_c(trained, tmp_path):
    path = experiment(tmp_path, tasks=["tnews"], steps=100000, checkpoint_every=2,
                      data_root=str(trained["data"]), cache_dir=str(trained["folder"] / "cache"))
    run = tmp_path / "run"
    with open(tmp_path / "stderr.txt", "w") as err:
        process = subprocess.Popen([sys.executable, "-m", "mtl_framework", "train", str(path),
                                    "--output", str(run)], stdout=subprocess.DEVNULL,
                                   stderr=err, env=child_env(), cwd=tmp_path)
    metrics = run / "metrics.jsonl"
    deadline = time.time() + 300
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 3):
        assert process.poll() is None and time.time() < deadline
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=120) == 130
    text = (tmp_path / "stderr.txt").read_text()
    assert "Traceback" not in text
    assert text.splitlines()[-1].startswith("interrupted at update ")
    assert list(run.rglob("*.tmp-*")) == [] and not (run / "train.lock").exists()


# --- own probes (docs/errors.md, issue 35's own cases) ----------------------------------------

def test_paths_and_values_that_used_to_end_in_a_traceback(tmp_path, capsys):
    assert refused(capsys, ["train", "a\0b.yaml"]) == \
        "'a\\x00b.yaml': cannot be read (embedded null byte)"
    assert refused(capsys, ["train", "/tmp/" + "a" * 5000 + ".yaml"]).endswith(
        "cannot be read (File name too long)")
    assert refused(capsys, ["train", "/dev/zero"]) == \
        "/dev/zero: more than 16,777,216 characters: not an experiment, spec or suite file"
    path = experiment(tmp_path)
    for override, expected in (("steps=1000000000000000000000000000000", "steps must be <= "
                                "1000000000"), ("batch_size=1000000000000",
                                                "batch_size must be <= 65536")):
        assert expected in refused(capsys, ["train", path, "--set", override])
    gbk = tmp_path / "gbk.txt"
    gbk.write_bytes("中文\n".encode("gbk"))
    assert refused(capsys, ["vocab", "build", "--text", gbk, "--output", tmp_path / "v.txt"]) \
        .startswith(f"{gbk}:1: not UTF-8 text")
    fifo = tmp_path / "out.txt"
    os.mkfifo(fifo)  # never a device: a regression must not replace /dev/full
    text = write(tmp_path / "t.txt", "中文\n")
    assert "is not a regular file (a device, FIFO or socket)" in refused(
        capsys, ["vocab", "build", "--text", text, "--output", fifo, "--force"])
    assert fifo.exists() and not fifo.is_file()


def test_windows_made_files_and_near_miss_labels_are_named(tmp_path, capsys):
    specs, data = tmp_path / "specs", tmp_path / "data"
    write(specs / "lf.yaml", {
        "dataset": "lf", "format": "delimited", "fields": {"text": 0, "label": 1},
        "files": {"train": "lf\\train.tsv"}, "tasks": [{
            "name": "lf", "type": "classification", "labels": ["ａ", "b"], "max_length": 32,
            "metric": "accuracy"}]})
    (data / "lf").mkdir(parents=True)
    (data / "lf" / "train.tsv").write_bytes("好\ta\r\n坏\tb\r\n".encode())
    capsys.readouterr()
    assert cli.main(["data", "stats", "lf", "--specs", str(specs), "--data-root", str(data)]) == 1
    assert "(a backslash in the path: on Linux and macOS a folder is /, not \\)" in \
        capsys.readouterr().out
    spec = (specs / "lf.yaml").read_text(encoding="utf-8").replace("lf\\\\train.tsv",
                                                                    "lf/train.tsv")
    (specs / "lf.yaml").write_text(spec.replace("lf\\train.tsv", "lf/train.tsv"),
                                   encoding="utf-8")
    assert cli.main(["data", "stats", "lf", "--specs", str(specs), "--data-root", str(data)]) == 0
    out = capsys.readouterr().out
    assert "skipped 1: label 'a' is not in the task's labels, but equals 'ａ' after Unicode " \
           "NFKC normalisation" in out  # the CRLF row 坏/b is read whole
    assert cli.main(["data", "stats", "lf", "--specs", str(specs), "--data-root", str(data),
                     "--split", "dev"]) == 2
    assert "--split dev: none of the tasks has it; their splits: train" in capsys.readouterr().err
    (data / "lf" / "train.tsv").write_bytes("好\tb\n".encode("utf-16"))
    report = ReadReport()
    task = load_registry([str(specs)]).select(["lf"])[0]
    assert list(read_files(task.format, [str(data / "lf" / "train.tsv")], task.options,
                           task.fields, task.type, task.labels, report)) == []
    assert list(report.skipped) == ["the file is UTF-16 (it starts with a UTF-16 byte-order "
                                    "mark): set options.encoding: utf-16, or save it as UTF-8"]


def test_a_full_disk_while_preparing_features_is_one_line(tmp_path, monkeypatch, capsys):
    import errno

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cache, "save_meta", full)
    rows = (DEMO_DATA / "tnews" / "train.json").read_text(encoding="utf-8").splitlines()[:40]
    write(tmp_path / "data" / "tnews" / "train.json", "\n".join(rows) + "\n")
    path = experiment(tmp_path, cache_dir=str(tmp_path / "cache"),
                      data_root=str(tmp_path / "data"))
    message = refused_late(capsys, ["data", "prepare", path, "--workers", "1"])
    assert "no space left on the device while writing tnews train's features" in message
    assert list((tmp_path / "cache").rglob("*.tmp-*")) == []


def test_a_train_file_that_is_a_folder_is_one_line(tmp_path, capsys):
    (tmp_path / "data" / "tnews" / "train.json").mkdir(parents=True)
    path = experiment(tmp_path, data_root=str(tmp_path / "data"))
    message = refused(capsys, ["train", path, "--output", tmp_path / "run"])
    assert message.endswith(f"train file of task 'tnews' is a folder: "
                            f"{tmp_path / 'data' / 'tnews' / 'train.json'}; name the file in it "
                            "(format 'jsonl' reads files)")
    assert not (tmp_path / "run").exists()


def test_a_spec_path_leaving_the_data_root_is_refused(tmp_path, capsys):
    write(tmp_path / "specs" / "up.yaml", {
        "dataset": "up", "format": "delimited", "fields": {"text": 0, "label": 1},
        "files": {"train": "../../etc/passwd"}, "tasks": [{
            "name": "up", "type": "classification", "labels": ["a"], "max_length": 32,
            "metric": "accuracy"}]})
    capsys.readouterr()
    assert cli.main(["tasks", "validate", str(tmp_path / "specs")]) == 2
    err = capsys.readouterr().err
    assert "split 'train': '../../etc/passwd' leads out of the data root (`..`): give an " \
           "absolute path for a file kept elsewhere" in err and "Traceback" not in err


def test_eval_every_with_a_missing_dev_file_is_refused_before_any_work(tmp_path, capsys):
    shutil.copytree(DEMO_DATA / "tnews", tmp_path / "data" / "tnews")
    (tmp_path / "data" / "tnews" / "dev.json").unlink()
    path = experiment(tmp_path, data_root=str(tmp_path / "data"), eval_every=1)
    message = refused(capsys, ["train", path, "--output", tmp_path / "run"])
    assert "dev file of task 'tnews' not found" in message and "or set eval_every: 0" in message
    assert not (tmp_path / "run").exists()


def test_predict_writes_null_for_a_row_with_a_lone_surrogate(trained, tmp_path):
    rows = write(tmp_path / "in.json", "".join(
        f'{{"sentence": "{text}", "keywords": ""}}\n' for text in ("好", "半个\\ud83d", "整个")))
    out = tmp_path / "out.jsonl"
    assert cli.main(["predict", str(trained["run"]), "--task", "tnews", "--input", str(rows),
                     "--output", str(out)]) == 0
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [line["prediction"] is None for line in lines] == [False, True, False]
    assert "lone UTF-16 surrogate" in lines[1]["error"] and ":2" in lines[1]["error"]


@pytest.mark.skipif(not (REPO.parent / "shared" / "real_formats" / "boson_ner").is_dir(),
                    reason="../shared/real_formats absent")
def test_data_stats_names_the_alias_it_read(capsys):
    capsys.readouterr()
    assert cli.main(["data", "stats", "boson", "--data-root",
                     str(REPO.parent / "shared" / "real_formats"), "--split", "train",
                     "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["files"] == ["boson_ner/origindata.txt"]
    assert row["spec_files"] == ["boson_ner/BosonNLP_NER_6C.txt"]


def test_two_exports_whose_names_slug_alike_are_named_as_such(tmp_path):
    from mtl_framework.transfer.benchmark import check_exports

    first, second = tmp_path / "my export", tmp_path / "my_export"
    with pytest.raises(UserError) as refusal:
        check_exports([str(first), str(second)])
    assert (f"exports {first} and {second}: different folders whose names both become "
            f"{str(second).strip('/').replace('/', '_')!r}") in str(refusal.value)
    with pytest.raises(UserError, match="the same export is given twice"):
        check_exports([str(first), str(first) + "/"])


def test_patience_without_any_score_says_why():
    from mtl_framework.loop.callbacks import BestTracker

    tracker = BestTracker(patience=2)
    for step in (1, 2):
        tracker.update(step, {"aggregate": None, "tasks": {}})  # every dev row unreadable
    assert tracker.exhausted()
    assert tracker.stop_reason().endswith(
        "(patience 2; no evaluation gave a dev aggregate at all: is the dev split readable? "
        "`mtl data stats TASK --split dev` counts its rows)")


def test_a_refused_finetune_names_its_settings_not_a_deleted_yaml(trained, tmp_path, capsys):
    export = tmp_path / "export"
    assert cli.main(["export", str(trained["run"]), "--format", "keras", "--output",
                     str(export)]) == 0
    message = refused(capsys, ["finetune", export, "tnews", "--data-root", trained["data"],
                               "--dropout", "5", "--output", tmp_path / "ft"])
    assert message.startswith("the fine-tune's settings (finetune.yaml, not written):")
    assert "mtl-finetune-" not in message and not (tmp_path / "ft").exists()


# --- permissions, honestly: a child `mtl` as an unprivileged user (root reads everything) ---

# Runs each argv of argv[1] (JSON) through cli.main in this one process (one start-up for
# all of them) and prints [{code, err}]: what a user's `mtl ...` would print and return.
AS_USER = """
import contextlib, io, json, sys
from mtl_framework import cli
results = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli.main(argv)
    results.append({"code": code, "err": err.getvalue()})
print("RESULTS " + json.dumps(results))
"""
NOBODY = 65534


def runnable_by_others(path):
    """`path` (links followed) can be run by a user who is neither its owner nor in its group."""
    path = os.path.realpath(path)
    folders = [os.path.dirname(path)]
    while folders[-1] != os.path.dirname(folders[-1]):
        folders.append(os.path.dirname(folders[-1]))
    return os.stat(path).st_mode & 0o005 == 0o005 and all(
        os.stat(folder).st_mode & 0o001 for folder in folders)


def unprivileged_python():
    """An interpreter uid 65534 can start: this one, or the system's of the same minor
    version (the venv's under /root is not), given this venv's packages by PYTHONPATH."""
    import sysconfig
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        if os.path.exists(candidate) and runnable_by_others(candidate):
            return candidate, [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    pytest.skip(f"no {version} that uid {NOBODY} can run (this one is {sys.executable})")


def run_unprivileged(commands, home):
    """`commands` ([[arg, ...], ...]) through cli.main in one child process that cannot
    read a chmod 000 file: as uid/gid 65534 when this process is root, else as this user.
    Returns [(code, [non-empty stderr lines])]; skips when no unprivileged child can start."""
    drop, python, env = {}, sys.executable, {**child_env(), "HOME": str(home),
                                             "PYTHONDONTWRITEBYTECODE": "1"}
    if os.geteuid() == 0:
        drop = {"user": NOBODY, "group": NOBODY, "extra_groups": []}
        os.chown(home, NOBODY, NOBODY)
        python, packages = unprivileged_python()
        env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], *packages])
    done = subprocess.run([python, "-s", "-c", AS_USER, json.dumps(commands)],
                          capture_output=True, text=True, env=env, cwd=home, timeout=300, **drop)
    marker = [line for line in done.stdout.splitlines() if line.startswith("RESULTS ")]
    if not marker and "PermissionError" in done.stderr and drop:
        pytest.skip(f"uid {NOBODY} cannot read the venv or the repository: {done.stderr[-300:]}")
    assert done.returncode == 0 and marker, done.stdout[-2000:] + done.stderr[-3000:]
    return [(r["code"], [line for line in r["err"].splitlines() if line.strip()])
            for r in json.loads(marker[0][len("RESULTS "):])]


@pytest.fixture
def shared_tmp():
    """A folder another user can traverse (pytest's tmp_path is 0700 under root's)."""
    import tempfile
    folder = Path(tempfile.mkdtemp(prefix="mtl-perm-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    for path in [folder, *folder.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)
    shutil.rmtree(folder)


def test_unreadable_files_and_read_only_outputs_as_an_unprivileged_user(trained, shared_tmp):
    data, home = shared_tmp / "data", shared_tmp / "home"
    shutil.copytree(trained["data"], data)
    home.mkdir()
    cache = shared_tmp / "cache"
    cache.mkdir()
    if os.geteuid() == 0:
        os.chown(cache, NOBODY, NOBODY)
    locked_data = shared_tmp / "locked"
    shutil.copytree(trained["data"], locked_data)
    locked_train = locked_data / "tnews" / "train.json"
    vocab = write(shared_tmp / "vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n的\n")
    run = shared_tmp / "run"  # a finished run, then made read-only
    shutil.copytree(trained["run"], run)
    read_only = shared_tmp / "read-only"
    read_only.mkdir()
    backbone = shared_tmp / "backbone"  # what finetune starts from
    assert cli.main(["export", str(trained["run"]), "--format", "keras", "--output",
                     str(backbone)]) == 0
    paths = {
        "data": experiment(shared_tmp, "data.yaml", data_root=str(locked_data),
                           cache_dir=str(cache)),
        "vocab": experiment(shared_tmp, "vocab.yaml", data_root=str(data), cache_dir=str(cache),
                            vocab=str(vocab)),
        "ok": experiment(shared_tmp, "ok.yaml", data_root=str(data), cache_dir=str(cache))}
    commands = {
        "data": ["train", paths["data"], "--output", shared_tmp / "out-data"],
        "vocab": ["train", paths["vocab"], "--output", shared_tmp / "out-vocab"],
        "train into a read-only folder": ["train", paths["ok"], "--output", read_only / "run"],
        "resume a read-only run": ["train", shutil.copy(trained["experiment"], shared_tmp),
                                   "--output", run, "--resume",
                                   "--set", "steps=3", "--set", f"data_root={data}",
                                   "--set", f"cache_dir={cache}"],
        "finetune into a read-only folder": ["finetune", backbone, "tnews", "--data-root", data,
                                             "--output", read_only / "ft"]}
    for path in (locked_train, vocab):
        path.chmod(0o000)
    for folder in (read_only, run):
        folder.chmod(0o555)
    def files():  # all but the child's HOME (matplotlib's and Keras's caches)
        return {k: v for k, v in snapshot(shared_tmp).items() if k.split(os.sep)[0] != "home"}
    before = files()
    results = run_unprivileged([[str(a) for a in argv] for argv in commands.values()], home)
    assert files() == before  # nothing written anywhere, the run included
    outcome = dict(zip(commands, results))
    for name, (code, lines) in outcome.items():
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (name, lines)
    message = {name: lines[0][len("error: "):] for name, (code, lines) in outcome.items()}
    spec = REPO / "task_specs" / "tnews.yaml"  # its task entry, which names the files
    assert message["data"] == (f"{spec}:{line_of(spec, 'name: tnews')}: train file of task "
                               "'tnews' is not readable "
                               f"(permissions): {locked_train}; `chmod +r` it")
    assert message["vocab"] == (f"{vocab}: cannot be read (Permission denied); named at "
                                f"{paths['vocab']}:{line_of(paths['vocab'], 'vocab:')}")
    assert message["train into a read-only folder"] == (
        f"--output {read_only / 'run'}: {read_only} is not writable: give another path")
    assert message["resume a read-only run"] == (
        f"--output {run}: {run} is not writable: give another path")
    assert message["finetune into a read-only folder"] == (
        f"--output {read_only / 'ft'}: {read_only} is not writable: give another path")


# --- case 12 in mixed_float16 itself: an overflowing micro-batch below the stop threshold ---

def train_overflowing_float16(tmp_path, capsys, steps, checkpoint_every):
    """A mixed_float16 run whose loss_weight 100 x the starting scale 2^15 overflows float16
    in the backward pass (the dynamic scale halves on each skipped micro-batch until the
    gradients fit): (its run folder, stderr, its metrics.jsonl records). The padded step
    (packed: false): the scale settles at float16's edge, so this trajectory is one
    rounding's; the step with the last layer at the [CLS] rows rounds otherwise and
    overflows once more, at update 5 (a second line, rightly: another run of skips)."""
    path = experiment(tmp_path, precision="mixed_float16", tasks=[{"name": "tnews",
                      "loss_weight": 100}], steps=steps, tasks_per_update=2, batch_size=2,
                      max_length=16, checkpoint_every=checkpoint_every, eval_every=0, seed=1,
                      backbone=dict(num_layers=1, hidden_size=16, num_heads=2,
                                    intermediate_size=32, vocab_size=300, packed=False),
                      cache_dir=str(tmp_path / "cache"))
    run = tmp_path / "run"
    capsys.readouterr()
    assert cli.main(["train", str(path), "--output", str(run)]) == 0
    err = capsys.readouterr().err
    return run, err, [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_mixed_float16_overflow_is_said_on_the_console_and_training_goes_on(tmp_path, capsys):
    run, err, records = train_overflowing_float16(tmp_path, capsys, steps=5, checkpoint_every=0)
    skipped = records[-1]["skipped"]["tnews"]
    assert 0 < skipped < 20  # below the stop threshold (20 in a row)
    first_bad = next(r["step"] for r in records if r["skipped"]["tnews"])
    warnings = [line for line in err.splitlines() if line.startswith("warning: update ")]
    assert warnings == [f"warning: update {first_bad}: a micro-batch of tnews had a non-finite "
                        "loss or gradient and was skipped (2 skipped so far; metrics.jsonl "
                        "counts them)"], err  # one line for the run of skips, not one each
    assert np.isfinite(records[-1]["loss"])  # it went on once the scale fit
    state = np.load(run / "checkpoints" / f"step-{5:08d}" / "state.npz")
    assert float(state["loss_scale/tnews"]) == 2.0 ** 15 / 2 ** skipped  # halved per skip
