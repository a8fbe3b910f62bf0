"""The three scripts in examples/ run on the bundled demo data (issue 22, point 4), each
with few updates; their raw-string predictions equal `predict_file`'s on the same texts
written in the task's own file format (the adapter path, independent of predict_texts)."""
import importlib.util
import json

import pytest

from conftest import DEMO_DATA, REPO


def example(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}", REPO / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """examples/train_mixture.py, 6 updates (3 evaluations, EarlyStopping may stop it)."""
    tmp = tmp_path_factory.mktemp("examples")
    with pytest.MonkeyPatch.context() as patch:  # the module's cache, restored after
        patch.setenv("MTL_CACHE_DIR", str(tmp / "cache"))
        example("train_mixture").main(["--output", str(tmp / "run"), "--steps", "6"])
        yield tmp


def test_train_mixture_with_stock_callbacks(trained):
    rows = (trained / "run" / "epochs.csv").read_text().splitlines()
    header = rows[0].split(",")
    assert {"dev/aggregate", "dev/tnews", "loss/cluener", "rate/chnsenticorp"} <= set(header)
    evaluations = [json.loads(line) for line in (trained / "run" / "evaluations.jsonl").open()]
    assert len(rows) - 1 == len(evaluations)  # one CSV row per evaluation epoch
    column = header.index("dev/aggregate")
    assert [float(r.split(",")[column]) for r in rows[1:]] == \
        pytest.approx([e["aggregate"] for e in evaluations])
    export = trained / "run" / "export"
    assert (export / "heads.json").is_file() and (export / "config.json").is_file()
    best = max(evaluations, key=lambda e: e["aggregate"])  # first of the maxima: strict
    assert f"best-step-{best['step']:08d}" in (export / "README.md").read_text()


def test_finetune_classifier_then_predict_raw_strings(trained, tmp_path, capsys):
    module = example("finetune_classifier")
    module.main(["--export", str(trained / "run" / "export"), "--output", str(tmp_path / "ft"),
                 "--steps", "4"])
    out = capsys.readouterr().out.splitlines()
    printed = [line.split(None, 1) for line in out if line.strip().endswith(tuple("。"))]
    assert [text for _, text in printed] == module.REVIEWS
    assert all(label in ("negative", "positive") for label, _ in printed)
    # the same texts through the task's own format (TSV: text<TAB>label), by predict_file
    from mtl_framework.evaluation.predict import load_model

    model = load_model(str(tmp_path / "ft"), data_root=str(DEMO_DATA))
    tsv = tmp_path / "reviews.tsv"
    tsv.write_text("".join(f"{text}\tpositive\n" for text in module.REVIEWS), encoding="utf-8")
    model.predict_file("chnsenticorp", str(tsv), str(tmp_path / "out.jsonl"))
    from_file = [json.loads(line)["prediction"] for line in (tmp_path / "out.jsonl").open()]
    assert [label for label, _ in printed] == from_file


def test_predict_ner_from_raw_strings(trained, tmp_path):
    module = example("predict_ner")
    model = module.main(["--model", str(trained / "run" / "export")])
    spans = model.predict_texts("cluener", module.SENTENCES)
    labels = set(model.labels(model.task("cluener")))
    for sentence, found in zip(module.SENTENCES, spans):
        for span in found:
            assert span["text"] == sentence[span["start"]:span["end"]] and span["type"] in labels
    source = tmp_path / "sentences.json"
    source.write_text("".join(json.dumps({"text": s, "label": {}}, ensure_ascii=False) + "\n"
                              for s in module.SENTENCES), encoding="utf-8")
    model.predict_file("cluener", str(source), str(tmp_path / "out.jsonl"))
    assert [json.loads(line)["prediction"] for line in (tmp_path / "out.jsonl").open()] == spans


def test_raw_strings_need_a_head_and_give_one_prediction_each(trained):
    from mtl_framework.errors import UserError
    from mtl_framework.evaluation.predict import load_model

    model = load_model(str(trained / "run"), data_root=str(DEMO_DATA))
    with pytest.raises(UserError, match="no head for task 'cmrc2018'"):
        model.predict_texts("cmrc2018", ["x"])
    assert len(model.predict_texts("tnews", ["一个标题", "另一个标题"])) == 2
