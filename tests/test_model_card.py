"""Every export's model card (Hugging Face metadata) and provenance, and no absolute path in it.

A tiny run on the demo data started from a saved backbone folder (`backbone: {init:
a_backbone}`, so its cards name a base model) is exported in every format; the cards
are read back with huggingface_hub and compared with the run's own files, and every
exported byte is searched for the paths of the machine.
"""
import importlib.util
import json

import pytest
import yaml
from huggingface_hub import ModelCard

from mtl_framework import cli
from mtl_framework.formats import FORMATS as FORMAT_TABLE
from mtl_framework.rundir.provenance import provenance
from mtl_framework.scoring.scorers import score_name

from conftest import DEMO_DATA, REPO, write_tiny_experiment

FORMATS = ["keras", "bert4keras", "roformer-pytorch"] + \
    (["keras-hub"] if importlib.util.find_spec("keras_hub") else [])
TASKS = ["tnews", "cluener"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from mtl_framework import RoFormerV2Backbone
    from mtl_framework.tokenizer import build_vocab, count_units, write_vocab

    root = tmp_path_factory.mktemp("card")
    texts = [json.loads(line)["sentence"] for line in
             (DEMO_DATA / "tnews" / "train.json").read_text(encoding="utf-8").splitlines()]
    write_vocab(build_vocab(count_units(texts), max_size=400), root / "vocab.txt")
    size = len((root / "vocab.txt").read_text(encoding="utf-8").splitlines())
    backbone = RoFormerV2Backbone(vocab_size=size, num_layers=1, hidden_size=32, num_heads=2)
    backbone.build()
    backbone.save_preset(str(root / "a_backbone"), str(root / "vocab.txt"))
    experiment = write_tiny_experiment(root / "b.yaml", backbone={"init": "a_backbone"},
                                       tasks=TASKS, steps=2, checkpoint_every=2, eval_every=2,
                                       eval_batches=2, max_length=32)
    assert cli.main(["train", str(experiment), "--output", str(root / "B")]) == 0
    exports = {}
    for fmt in FORMATS:
        exports[fmt] = root / f"b_{fmt}"
        assert cli.main(["export", str(root / "B"), "--format", fmt,
                         "--output", str(exports[fmt])]) == 0
    return root, exports


def test_the_run_directory_records_each_start(runs):
    root, _ = runs
    [line] = [json.loads(text) for text in (root / "B" / "provenance.jsonl").open()]
    assert line.pop("step") == 0 and line.pop("time")
    assert line == provenance()


def test_cards_hold_hub_metadata_from_the_run(runs):
    root, exports = runs
    # The datasets of the mixture, read from the specs' own files.
    datasets = [yaml.safe_load((REPO / "task_specs" / f"{task}.yaml").read_text(encoding="utf-8"))
                ["dataset"] for task in TASKS]
    dev = [json.loads(text) for text in (root / "B" / "evaluations.jsonl").open()]
    [last] = [line for line in dev if line["split"] == "dev"][-1:]
    heads = json.loads((root / "B" / "checkpoints" / "step-00000002" / "trainer.json")
                       .read_text())["heads"]
    for fmt, folder in exports.items():
        card = ModelCard.load(folder / "README.md")
        data = card.data
        assert ((data.language, data.license, data.library_name)
                == ("zh", "apache-2.0", FORMAT_TABLE[fmt].library))
        assert data.datasets == datasets and data.base_model == "a_backbone"
        assert fmt in data.tags and "mtl_framework" in data.tags
        results = {r.dataset_name: r for r in data.eval_results}
        assert set(results) == set(last["tasks"])
        for task, entry in last["tasks"].items():
            # the publisher's figure where the task has a scorer (cluener), else the metric
            assert results[task].metric_type == score_name(entry)
            assert results[task].metric_value == round(entry["score"], 4)
            assert results[task].dataset_split == "dev"
        assert results["tnews"].task_type == "text-classification" == \
            {"classification": "text-classification"}[heads["tnews"]["type"]]
        assert results["cluener"].task_type == "token-classification"
        assert f"| tnews | accuracy | {last['tasks']['tnews']['score']:.4f} |" in card.text
        assert "started from `a_backbone`" in card.text


def test_every_export_records_its_provenance(runs):
    from mtl_framework.rundir.trained_on import vocab_record

    root, exports = runs
    trained = [json.loads(text) for text in (root / "B" / "provenance.jsonl").open()]
    for fmt, folder in exports.items():
        record = json.loads((folder / "provenance.json").read_text())
        assert record == {"run": "B", "checkpoint": "checkpoints/step-00000002", "step": 2,
                          "format": fmt, "trained_by": trained, "exported_by": provenance(),
                          "tasks": ["tnews", "cluener"],
                          "vocab": vocab_record(root / "B" / "vocab.txt"),
                          "embedding": {}}  # no contrastive task: trained no embedding
        card = (folder / "README.md").read_text(encoding="utf-8")
        assert f"mtl_framework {provenance()['mtl_framework']} (" in card


def test_no_absolute_path_anywhere_in_an_export(runs):
    root, exports = runs
    places = {str(root), str(root.resolve()), str(REPO), str(REPO.resolve())}
    for folder in exports.values():
        files = [p for p in folder.rglob("*") if p.is_file()]
        assert len(files) >= 5
        for path in files:
            data = path.read_bytes()
            found = [place for place in places if place.encode() in data]
            assert not found, f"{path} holds {found}"


def test_hub_task_types_per_family_regression_is_similarity_not_classification():
    from mtl_framework.saving.model_card import eval_results

    families = {"tnews": "classification", "stsb_zh": "regression", "chid": "cloze",
                "cluener": "extraction_ner", "cmrc2018": "mrc_span", "c3_d": "multiple_choice"}
    evaluation = {"tasks": {task: {"metric": "m", "score": 0.5} for task in families}}
    heads = {task: {"type": family} for task, family in families.items()}
    types = {r.dataset_name: r.task_type for r in eval_results(evaluation, heads, {})}
    assert types == {"tnews": "text-classification", "stsb_zh": "sentence-similarity",
                     "chid": "multiple-choice", "cluener": "token-classification",
                     "cmrc2018": "question-answering", "c3_d": "multiple-choice"}
