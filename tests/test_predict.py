"""`mtl predict` on a tiny trained run: one task of every family, checked against the
input files read independently here (ids, order, counts, label names, spans whose
text is the mention); a `--with-heads` export predicts exactly what the run does."""
import json
import shutil
from pathlib import Path

import pytest
import yaml

from mtl_framework import cli

from conftest import json_objects

ROOT = Path(__file__).resolve().parents[1]
DEMO_DATA = ROOT / "experiments" / "demo" / "data"
MAX_LENGTH = 64

# Three families the demo data lacks, as small hand-written files in each one's format.
STS = ["今天天气很好\t今天天气不错\t4.5", "我喜欢吃苹果\t他在看电影\t0.5",
       "这部手机很好用\t这款手机非常好用\t4.8", "北京是中国的首都\t上海在下雨\t0.2",
       "明天去爬山吗\t明天要不要去爬山\t4.2", "猫在睡觉\t股票下跌了\t0.0"]
EVENTS = [
    {"id": "e1", "text": "中国队击败日本队获得冠军",
     "event_list": [{"event_type": "竞赛行为-胜负", "trigger": "击败", "trigger_start_index": 3,
                     "arguments": [{"role": "胜者", "argument": "中国队", "argument_start_index": 0},
                                   {"role": "败者", "argument": "日本队", "argument_start_index": 5}]}]},
    {"id": "e2", "text": "湖人队战胜了火箭队",
     "event_list": [{"event_type": "竞赛行为-胜负", "trigger": "战胜", "trigger_start_index": 3,
                     "arguments": [{"role": "胜者", "argument": "湖人队", "argument_start_index": 0},
                                   {"role": "败者", "argument": "火箭队", "argument_start_index": 6}]}]},
    {"id": "e3", "text": "今天没有比赛", "event_list": []},
]
CHID = [
    {"id": 10, "candidates": ["一心一意", "三心二意", "画蛇添足"],
     "content": "他做事总是#idiom#，从不分心。", "answer": 0},
    {"id": 11, "candidates": ["一心一意", "三心二意", "画蛇添足"],
     "content": "本来已经很好了，再改就是#idiom#。", "answer": 2},
    {"id": 12, "candidates": ["一心一意", "三心二意", "画蛇添足"],
     "content": "上课时他#idiom#，老是看窗外。", "answer": 1},
]
OCNLI = [
    {"sentence1": "他每天早上跑步", "sentence2": "他有运动的习惯", "label": "entailment", "id": 0},
    {"sentence1": "她买了一本书", "sentence2": "她什么也没买", "label": "contradiction", "id": 1},
    {"sentence1": "会议在下午举行", "sentence2": "会议很重要", "label": "neutral", "id": 2},
    {"sentence1": "小王去了北京", "sentence2": "小王在北京", "label": "entailment", "id": 3},
]
SPECS = {
    "tiny_sts.yaml": {"dataset": "tiny_sts", "format": "delimited",
                      "files": {"train": "tiny_sts/train.tsv", "dev": "tiny_sts/train.tsv"},
                      "options": {"delimiter": "\t"}, "fields": {"text": 0, "text_b": 1, "label": 2},
                      "tasks": [{"name": "tiny_sts", "type": "regression", "max_length": 64,
                                 "metric": "spearman"}]},
    "tiny_event.yaml": {"dataset": "tiny_event", "format": "event_json",
                        "files": {"train": "tiny_event/train.json", "dev": "tiny_event/train.json"},
                        "tasks": [{"name": "tiny_event", "type": "extraction_event",
                                   "labels": ["竞赛行为-胜负", "竞赛行为-胜负:胜者", "竞赛行为-胜负:败者"],
                                   "max_length": 64, "metric": "event_f1"}]},
}
# One task per family, and the dev (or only) file each is predicted on.
TASKS = {"tnews": "tnews/dev.json", "afqmc": "afqmc/dev.txt", "ocnli": "ocnli/train.50k.json",
         "tiny_sts": "tiny_sts/train.tsv", "cmrc2018": "cmrc2018/dev.json",
         "c3_d": "c3/c3-d-dev.json", "chid": "fewclue/chid/train_few_all.json",
         "cluener": "cluener/dev.json", "duie_spo": "duie/predict.json",
         "tiny_event": "tiny_event/train.json", "cluewsc": "cluewsc2020/dev.json"}


def _write_lines(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n"
                            for r in rows), encoding="utf-8")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    return make_tiny_run(tmp_path_factory.mktemp("predict"))


def make_tiny_run(base):
    """A 1-layer run trained 2 updates on 11 tasks (every family), with its keras export."""
    from mtl_framework.loop.run import Run
    from mtl_framework.saving.writer import export

    data = base / "data"
    shutil.copytree(DEMO_DATA, data)
    _write_lines(data / "tiny_sts" / "train.tsv", STS)
    _write_lines(data / "tiny_event" / "train.json", EVENTS)
    _write_lines(data / "fewclue" / "chid" / "train_few_all.json", CHID)
    _write_lines(data / "ocnli" / "train.50k.json", OCNLI)
    # 8 DuIE texts: an untrained GPLinker links ~1/4 of all subject-object pairs (~200 MB
    # of triples for the 100 dev texts)
    dev = (data / "duie" / "dev_data_2000_todd.json").read_text(encoding="utf-8").splitlines()
    _write_lines(data / "duie" / "predict.json", dev[:8])
    specs = base / "specs"
    specs.mkdir()
    for name, spec in SPECS.items():
        (specs / name).write_text(yaml.safe_dump(spec, allow_unicode=True), encoding="utf-8")
    experiment = {
        "name": "tiny", "data_root": str(data), "task_specs": [str(specs)],
        "cache_dir": str(base / "cache"),
        "backbone": {"num_layers": 1, "hidden_size": 32, "num_heads": 2,
                     "intermediate_size": 64, "vocab_size": 3000},
        "tasks": list(TASKS), "batch_size": 4, "max_length": MAX_LENGTH, "tasks_per_update": 4,
        "steps": 2, "optimizer": {"name": "adamw", "lr": 0.001}, "seed": 0,
        "checkpoint_every": 0, "keep_checkpoints": 1, "eval_every": 0}
    path = base / "tiny.yaml"
    path.write_text(yaml.safe_dump(experiment, allow_unicode=True), encoding="utf-8")
    run_dir = base / "run"
    Run(str(path), output=str(run_dir), log=lambda message: None).train()
    export_dir = base / "export"
    export(str(run_dir), "keras", str(export_dir), with_heads=True, log=None)
    return {"run": run_dir, "export": export_dir, "data": data, "specs": specs, "base": base}


def predict(tiny_run, source, task, output, *extra):
    argv = ["predict", str(tiny_run[source]), "--task", task, "--input",
            str(tiny_run["data"] / TASKS[task]), "--output", str(output), "--batch-size", "8",
            *extra]
    assert cli.main(argv) == 0
    return [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def outputs(tiny_run):
    """Every task's predictions on its file, from the run directory."""
    folder = tiny_run["base"] / "outputs"
    folder.mkdir()
    return {task: predict(tiny_run, "run", task, folder / f"{task}.jsonl") for task in TASKS}


def _json_lines(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _spec_labels(task):
    from mtl_framework.config.registry import load_registry

    return load_registry().tasks[task].labels


def test_classification_and_matching_give_label_names_in_input_order(tiny_run, outputs):
    tnews = outputs["tnews"]
    assert len(tnews) == len(_json_lines(tiny_run["data"] / TASKS["tnews"]))
    assert all("id" not in line for line in tnews)  # the tnews spec maps no id field
    assert {line["prediction"] for line in tnews} <= set(_spec_labels("tnews"))
    afqmc_rows = (tiny_run["data"] / TASKS["afqmc"]).read_text(encoding="utf-8").splitlines()
    assert len(outputs["afqmc"]) == len(afqmc_rows)
    assert {line["prediction"] for line in outputs["afqmc"]} <= {"0", "1"}
    ocnli = _json_lines(tiny_run["data"] / TASKS["ocnli"])
    assert [line["id"] for line in outputs["ocnli"]] == [row["id"] for row in ocnli]
    assert {line["prediction"] for line in outputs["ocnli"]} <= {"entailment", "neutral",
                                                                 "contradiction"}


def test_regression_gives_numbers(outputs):
    assert len(outputs["tiny_sts"]) == len(STS)
    assert all(isinstance(line["prediction"], float) for line in outputs["tiny_sts"])


def test_mrc_span_gives_the_text_at_its_char_offset_per_question(tiny_run, outputs):
    data = json.loads((tiny_run["data"] / TASKS["cmrc2018"]).read_text(encoding="utf-8"))
    questions = [(qa["id"], p["context"]) for a in data["data"] for p in a["paragraphs"]
                 for qa in p["qas"]]
    lines = outputs["cmrc2018"]
    # every question once, in file order, though long contexts span several windows
    assert [line["id"] for line in lines] == [q for q, _ in questions]
    assert max(len(c) for _, c in questions) > MAX_LENGTH
    for line, (_, context) in zip(lines, questions):
        answer = line["prediction"]
        assert set(answer) == {"text", "start"}
        assert answer["text"] and context[answer["start"]:answer["start"] + len(answer["text"])] \
            == answer["text"]


def test_choice_families_give_an_index_and_its_candidate(tiny_run, outputs):
    c3 = json.loads((tiny_run["data"] / TASKS["c3_d"]).read_text(encoding="utf-8"))
    questions = [(f"{doc[2]}-{i}", q["choice"]) for doc in c3 for i, q in enumerate(doc[1])]
    assert [line["id"] for line in outputs["c3_d"]] == [q for q, _ in questions]
    for line, (_, choices) in zip(outputs["c3_d"], questions):
        assert line["prediction"]["text"] == choices[line["prediction"]["index"]]
    assert [line["id"] for line in outputs["chid"]] == [row["id"] for row in CHID]
    for line, row in zip(outputs["chid"], CHID):
        assert line["prediction"]["text"] == row["candidates"][line["prediction"]["index"]]


def test_ner_spans_are_half_open_and_their_text_is_the_mention(tiny_run, outputs):
    rows = _json_lines(tiny_run["data"] / TASKS["cluener"])
    lines = outputs["cluener"]
    assert len(lines) == len(rows)
    types = set(_spec_labels("cluener"))
    found = 0
    for line, row in zip(lines, rows):
        for entity in line["prediction"]:
            assert entity["type"] in types
            assert 0 <= entity["start"] < entity["end"] <= len(row["text"])
            assert row["text"][entity["start"]:entity["end"]] == entity["text"]
            found += 1
    assert found > 0  # an untrained pointer fires on many pairs: the check above ran


def test_relation_and_event_arguments_carry_text_and_char_spans(tiny_run, outputs):
    rows = _json_lines(tiny_run["data"] / TASKS["duie_spo"])
    assert len(outputs["duie_spo"]) == len(rows)
    from mtl_framework.config.registry import load_registry

    predicates = set(load_registry().tasks["duie_spo"].resolve_labels(str(tiny_run["data"])))
    for line, row in zip(outputs["duie_spo"], rows):
        for triple in line["prediction"]:
            assert triple["predicate"] in predicates
            for part in ("subject", "object"):
                span = triple[part]
                assert row["text"][span["start"]:span["end"]] == span["text"] != ""
    assert [line["id"] for line in outputs["tiny_event"]] == [row["id"] for row in EVENTS]
    for line, row in zip(outputs["tiny_event"], EVENTS):
        for event in line["prediction"]:
            assert event["event_type"] == "竞赛行为-胜负"
            spans = ([event["trigger"]] if event["trigger"] else []) + event["arguments"]
            assert all(row["text"][s["start"]:s["end"]] == s["text"] for s in spans)
            assert {a["role"] for a in event["arguments"]} <= {"胜者", "败者"}


def test_coreference_gives_label_names_and_says_why_a_cut_span_has_none(tiny_run, outputs,
                                                                       tmp_path):
    rows = _json_lines(tiny_run["data"] / TASKS["cluewsc"])
    lines = outputs["cluewsc"]
    assert [line["id"] for line in lines] == [row["idx"] for row in rows]
    labelled = [line for line in lines if line["prediction"] is not None]
    cut = [line for line in lines if line["prediction"] is None]
    assert {line["prediction"] for line in labelled} <= {"true", "false"} and labelled
    # training drops these (a span past max_length 64); predict keeps the line and says why
    assert cut and all(line["error"] == "span truncated (past max_length)" for line in cut)
    longer = predict(tiny_run, "run", "cluewsc", tmp_path / "wsc.jsonl", "--max-length", "128")
    assert sum(line["prediction"] is None for line in longer) < len(cut)


def test_export_with_heads_predicts_what_the_run_predicts(tiny_run, outputs, tmp_path):
    for task in ("cluener", "cmrc2018", "tiny_event", "c3_d"):
        from_export = predict(tiny_run, "export", task, tmp_path / f"{task}.jsonl",
                              "--specs", str(tiny_run["specs"]), "--data-root",
                              str(tiny_run["data"]), "--max-length", str(MAX_LENGTH))
        assert from_export == outputs[task], task


def test_user_errors_are_one_line_exit_2_and_write_nothing(tiny_run, tmp_path, capsys):
    out = tmp_path / "out.jsonl"
    run = str(tiny_run["run"])
    cases = [
        (["--task", "nosuch", "--input", str(tiny_run["data"] / TASKS["tnews"])], "no head for task"),
        (["--task", "tnews", "--input", str(tmp_path / "missing.json")], "no such file"),
        (["--task", "tnews"], "needs --input"),
    ]
    bad = tmp_path / "bad.json"
    bad.write_text("not json\n{also not\n", encoding="utf-8")
    cases.append((["--task", "tnews", "--input", str(bad)], "no example could be read"))
    for extra, message in cases:
        capsys.readouterr()
        assert cli.main(["predict", run, *extra, "--output", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err
    assert not out.exists()
    # an export without heads
    from mtl_framework.saving.writer import export

    bare = tmp_path / "bare"
    export(run, "keras", str(bare), log=None)
    assert cli.main(["predict", str(bare), "--task", "tnews", "--input",
                     str(tiny_run["data"] / TASKS["tnews"]), "--output", str(out)]) == 2
    assert "--with-heads" in capsys.readouterr().err
    assert not out.exists()


def test_clue_files_from_real_test_splits(tiny_run, shared_data, tmp_path, capsys):
    out = tmp_path / "submit"
    # 6,345 real test examples (CMRC2018's 2,000 questions in ~20 windows of 64 tokens each)
    assert cli.main(["predict", str(tiny_run["run"]), "--clue", "--data-root", str(shared_data),
                     "--output", str(out), "--batch-size", "64", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert sorted(p.name for p in out.iterdir()) == [
        "cluener_predict.json", "cmrc2018_predict.json", "ocnli_50k_predict.json"]
    # ids: the test files' own, in their order
    ocnli = _json_lines(shared_data / "ocnli" / "test.json")
    lines = _json_lines(out / "ocnli_50k_predict.json")
    assert [line["id"] for line in lines] == [row["id"] for row in ocnli] and len(lines) == 3000
    assert {line["label"] for line in lines} <= {"entailment", "neutral", "contradiction"}
    cmrc = json.loads((shared_data / "cmrc2018" / "test.json").read_text(encoding="utf-8"))
    contexts = {qa["id"]: p["context"] for a in cmrc["data"] for p in a["paragraphs"]
                for qa in p["qas"]}
    answers = json.loads((out / "cmrc2018_predict.json").read_text(encoding="utf-8"))
    assert list(answers) == list(contexts) and len(answers) == 2000
    assert all(text in contexts[q] for q, text in answers.items())
    cluener = json_objects(shared_data / "cluener" / "test.json")
    lines = _json_lines(out / "cluener_predict.json")
    assert [line["id"] for line in lines] == [row["id"] for row in cluener] and len(lines) == 1345
    for line, row in zip(lines, cluener):
        for type_, mentions in line["label"].items():
            for mention, spans in mentions.items():
                assert all(row["text"][s:e + 1] == mention for s, e in spans)  # inclusive ends
    assert summary["written"] == {"ocnli_50k_predict.json": 3000, "cmrc2018_predict.json": 2000,
                                  "cluener_predict.json": 1345}
    skipped = summary["skipped"]
    assert "no test split" in skipped["tnews"] and "no test split" in skipped["cluewsc"]
    assert "has no id" in skipped["afqmc_predict.json"]  # the TSV mirror dropped CLUE's ids
    assert "not CLUE's" in skipped["c311_predict.json"]  # nlpdata's C3 numbers no question
    assert "not a CLUE 1.1 ChID blank" in skipped["chid11_predict.json"]  # FewCLUE's release
