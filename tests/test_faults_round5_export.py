"""Issue 51's export cases (R5-23, R5-54, R5-63, R5-76), replayed through the CLI.

One tiny float32 BERT run (max_positions 64; tnews and a contrastive task that trained CLS
pooling, normalised, with a query prefix; 2 updates), exported as keras and as
transformers, serves the module; cases that damage a folder copy it first.
"""
import json
import shutil

import numpy as np
import pytest
import yaml
from test_faults import DEMO_DATA, refused, snapshot

from mtl_framework import cli

from conftest import ONE_LAYER, afqmc_pairs, write_spec, write_tiny_experiment

BERT = {"architecture": "bert", **ONE_LAYER, "max_positions": 64}
EMBEDDING = {"loss": "cosent", "pooling": "cls", "normalize": True, "query_prefix": "查询：",
             "matryoshka_dims": [16]}
TASK = {"name": "embed_cls", "type": "contrastive", "max_length": 32, "metric": "cosine_spearman",
        "embedding": EMBEDDING}
TEXTS = ["蚂蚁借呗等额还款可以换成先息后本吗", "花呗"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("round5_export")
    write_spec(root / "specs", "afqmc_embed", [TASK], afqmc_pairs())
    experiment = write_tiny_experiment(
        root / "experiment.yaml", backbone=BERT, tasks=["tnews", "embed_cls"],
        task_specs=[str(root / "specs")], precision="float32", max_length=32, steps=2)
    run = root / "run"
    assert cli.main(["train", str(experiment), "--output", str(run)]) == 0
    exports = {fmt: root / fmt for fmt in ("keras", "transformers")}
    for fmt, folder in exports.items():
        assert cli.main(["export", str(run), "--format", fmt, "--output", str(folder)]) == 0
    return {"root": root, "run": run, **exports}


def encoded(capsys, model, *flags):
    """`mtl encode MODEL --text ... FLAGS` on stdout: (vectors, what it said on stderr)."""
    capsys.readouterr()
    argv = ["encode", str(model), *(a for t in TEXTS for a in ("--text", t)), *flags]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    vectors = np.array([json.loads(line)["embedding"] for line in captured.out.splitlines()])
    return vectors, captured.err


def test_r5_23_a_keras_export_encodes_as_the_run_trained(trained, capsys):
    """A plain `--format keras` export records the run's embedding (provenance.json
    "embedding"); `mtl encode` applies it: CLS, normalised, the query prefix, the
    Matryoshka dims, as the run itself encodes."""
    recorded = json.loads((trained["keras"] / "provenance.json").read_text())["embedding"]
    assert recorded == {"embed_cls": {"pooling": "cls", "normalize": True,
                                      "query_prefix": "查询：", "passage_prefix": "",
                                      "matryoshka_dims": [16]}}
    card = (trained["keras"] / "README.md").read_text(encoding="utf-8")
    assert '- `embed_cls`: pooling `cls`, L2-normalised, query prompt "查询：", Matryoshka ' \
           'dims 16' in card
    for flags in ([], ["--side", "query"], ["--dim", "16"]):
        ours, said = encoded(capsys, trained["keras"], *flags)
        run, _ = encoded(capsys, trained["run"], *flags)
        assert ours.shape == (2, 16 if flags == ["--dim", "16"] else 32)
        assert np.allclose(np.linalg.norm(ours, axis=1), 1, atol=1e-6)  # normalised
        assert np.abs(ours - run).max() < 1e-6, flags
        assert "sentence embedding" not in said


def test_r5_23_an_export_without_an_embedding_says_so(trained, tmp_path, capsys):
    """An export of a run that trained none ({}) and one older than the record (no key):
    mean pooling, not normalised, and one line saying which."""
    folder = tmp_path / "keras"
    shutil.copytree(trained["keras"], folder)
    provenance = json.loads((folder / "provenance.json").read_text())
    for embedding, line in (({}, f"{folder / 'provenance.json'}: the run trained no sentence "
                                 "embedding (no contrastive task): mean pooling, not normalised"),
                            (None, f"{folder}: declares no sentence embedding (no heads.json, "
                                   "1_Pooling/ or provenance.json \"embedding\"): mean pooling")):
        record = {**provenance, "embedding": embedding} if embedding is not None else \
            {k: v for k, v in provenance.items() if k != "embedding"}
        (folder / "provenance.json").write_text(json.dumps(record))
        vectors, said = encoded(capsys, folder)
        assert line in said
        assert not np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-3)  # not normalised


@pytest.mark.parametrize("fmt", ["transformers", "keras"])
def test_r5_54_a_replaced_vocab_of_the_same_size_is_refused(trained, fmt, tmp_path, capsys):
    folder = tmp_path / fmt
    shutil.copytree(trained[fmt], folder)
    tokens = (folder / "vocab.txt").read_text(encoding="utf-8").splitlines()
    tokens[10], tokens[11] = tokens[11], tokens[10]  # same size, two ids swapped
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    holder = folder / ("provenance.json" if fmt == "transformers" else "config.json")
    message = refused(capsys, ["encode", folder, "--text", "花呗"], run_dir=folder)
    assert message.startswith(f"{folder / 'vocab.txt'}: not the vocab {holder} records "
                              f"(same size ({len(tokens)} tokens) but other content")
    assert message.endswith("copy the vocab.txt of the export (or of its run) back")


def test_r5_63_bert_backbone_from_preset_loads_a_transformers_export(trained):
    from mtl_framework.architectures.bert.backbone import BertBackbone

    theirs = BertBackbone.from_preset(str(trained["transformers"]))
    ours = BertBackbone.from_preset(str(trained["keras"]))
    assert theirs.config["max_positions"] == 64
    assert len(theirs.weights) == len(ours.weights)
    for a, b in zip(theirs.weights, ours.weights):
        assert a.path.split("/", 1)[1] == b.path.split("/", 1)[1]
        assert np.array_equal(a.numpy(), b.numpy()), a.path


@pytest.mark.parametrize("fmt", ["transformers", "keras"])
def test_r5_76_finetune_defaults_to_the_position_table(trained, fmt, tmp_path, capsys):
    common = ["tnews", "--data-root", DEMO_DATA, "--steps", "1", "--batch-size", "2",
              "--eval-max-examples", "4", "--cache-dir", trained["root"] / "cache"]
    output = tmp_path / "too_long"
    message = refused(capsys, ["finetune", trained[fmt], *common, "--output", output,
                               "--max-length", "100"])
    assert message == (f"--max-length 100: longer than the backbone's max_positions 64 "
                       f"({trained[fmt] / 'config.json'}: its learned position table has no "
                       "rows past it): give --max-length 64 or less")
    assert not output.exists()
    before = snapshot(trained[fmt])
    output = tmp_path / "default"
    capsys.readouterr()
    assert cli.main([str(a) for a in ["finetune", trained[fmt], *common, "--output", output]]) == 0
    said = capsys.readouterr()
    assert "max length 64: the backbone's position table" in said.out + said.err
    assert yaml.safe_load((output / "finetune.yaml").read_text())["max_length"] == 64
    assert snapshot(trained[fmt]) == before
