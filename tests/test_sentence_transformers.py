"""`mtl export --format transformers` of a run with contrastive tasks is the sentence
embedding the run trained: pooling, normalisation and prompts as its heads record them.

One tiny BERT run (float32) trains tnews and two contrastive tasks that disagree (CLS +
normalised + a query prompt; mean, not normalised, query and passage prompts); each is
exported with `--embedding-task`. The folders are loaded as users load them, in a child
process of each torch venv (tests/interop/sentence_worker.py): `.venv-current` (`make
interop-current`: sentence-transformers 6, transformers 5) and `.venv-torch` (`make
interop-torch`: 3.4.1, 4.50.3); each check skips where its venv is absent. The reference
is the run itself: `Encoder(run, task=...)` (evaluation/encode.py)."""
import json
import os
import subprocess

import numpy as np
import pytest

from mtl_framework.cli import main as mtl
from mtl_framework.errors import UserError
from mtl_framework.formats import sentence_transformers as st

from conftest import REPO, write_tiny_experiment

WORKER = REPO / "tests" / "interop" / "sentence_worker.py"
# MTL_CURRENT_PYTHON / MTL_TORCH_PYTHON: another interpreter that has the packages
VENVS = {"current": os.environ.get("MTL_CURRENT_PYTHON") or REPO / ".venv-current/bin/python",
         "pinned": os.environ.get("MTL_TORCH_PYTHON") or REPO / ".venv-torch/bin/python"}
BERT = {"architecture": "bert", "num_layers": 1, "hidden_size": 32, "num_heads": 2,
        "intermediate_size": 64, "dropout": 0.0, "max_positions": 64}
# what each contrastive task trains (its spec's `embedding:`), and the prompts its export holds
TASKS = {
    "embed_cls": ({"pooling": "cls", "normalize": True, "query_prefix": "查询：",
                   "passage_prefix": ""}, {"query": "查询："}),
    "embed_mean": ({"pooling": "mean", "normalize": False, "query_prefix": "问：",
                    "passage_prefix": "答："}, {"query": "问：", "passage": "答："}),
}
SPEC = """dataset: afqmc_embed
description: AFQMC's pairs as two sentence embeddings that disagree (tests)
source: https://github.com/CLUEbenchmark/CLUE
license: research use
format: delimited
files:
  train: afqmc/train.txt
  dev: afqmc/dev.txt
options:
  delimiter: "\\t"
fields:
  text: 0
  text_b: 1
  label: 2
tasks:
""" + "".join(f"""  - name: {name}
    type: contrastive
    max_length: 32
    metric: cosine_spearman
    embedding: {json.dumps({"loss": "cosent", **settings}, ensure_ascii=False)}
""" for name, (settings, _) in TASKS.items())
# a mixed-case one (lower-cased by both tokenizers) and one past max_length 32 (cut alike)
TEXTS = ["蚂蚁借呗等额还款可以换成先息后本吗", "花呗", "Hello World 你好",
         "我的花呗账单是***，还款怎么是***我的花呗，月结出来说让我还***元，我自己算了一下详细名单"
         "我应该还***元"]
TOLERANCE = 1e-5  # float32 on both sides


def worker_python(venv):
    """The interpreter of `venv`, or pytest.skip saying why there is none."""
    python = str(VENVS[venv])
    if not os.path.exists(python):
        pytest.skip(f"{python} not found (run `make interop-{'current' if venv == 'current' else 'torch'}`)")
    result = subprocess.run([python, "-c", "import torch, transformers, sentence_transformers"],
                            capture_output=True, text=True, timeout=300)
    if result.returncode:
        pytest.skip(f"{python} cannot import torch/transformers/sentence_transformers: "
                    f"{result.stderr[-300:]}")
    return python


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(run, {task: export folder}, {task: {side: the run's own vectors}})."""
    from mtl_framework.evaluation.encode import Encoder

    root = tmp_path_factory.mktemp("sentence")
    (root / "specs").mkdir()
    (root / "specs" / "afqmc_embed.yaml").write_text(SPEC, encoding="utf-8")
    experiment = write_tiny_experiment(
        root / "experiment.yaml", backbone=BERT, tasks=["tnews", *TASKS],
        task_specs=[str(root / "specs")], precision="float32", max_length=32, steps=2,
        tasks_per_update=3)
    run = root / "run"
    assert mtl(["train", str(experiment), "--output", str(run)]) == 0
    exports, expected = {}, {}
    for task in TASKS:
        exports[task] = root / task
        assert mtl(["export", str(run), "--format", "transformers", "--embedding-task", task,
                    "--output", str(exports[task])]) == 0
        encoder = Encoder(str(run), task=task)
        expected[task] = {side: encoder.encode(TEXTS, side=side or None)
                          for side in ("", "query", "passage")}
    return run, exports, expected


def test_the_export_declares_what_each_task_trained(trained):
    run, exports, _ = trained
    for task, (settings, prompts) in TASKS.items():
        folder = exports[task]
        modules = json.loads((folder / st.MODULES).read_text())
        assert [m["type"].rsplit(".", 1)[1] for m in modules] == \
            ["Transformer", "Pooling"] + (["Normalize"] if settings["normalize"] else [])
        pooling = json.loads((folder / "1_Pooling/config.json").read_text())
        assert (pooling["pooling_mode_cls_token"], pooling["pooling_mode_mean_tokens"],
                pooling["word_embedding_dimension"]) == (
            settings["pooling"] == "cls", settings["pooling"] == "mean", 32)
        config = json.loads((folder / st.ST_CONFIG).read_text())
        assert (config["prompts"], config["default_prompt_name"], config["similarity_fn_name"],
                config["__version__"]["sentence_transformers"]) == (prompts, None, "cosine", "3.4.1")
        assert json.loads((folder / st.BERT_CONFIG).read_text())["max_seq_length"] == 32
        assert st.folder_settings(str(folder)) == {
            "pooling": settings["pooling"], "normalize": settings["normalize"],
            "prompts": {"": {"query": settings["query_prefix"],
                             "passage": settings["passage_prefix"]}}}
        card = (folder / "README.md").read_text(encoding="utf-8")
        assert f"As the contrastive task {task} trained it: pooling `{settings['pooling']}`" in card
        assert ("L2-normalised (2_Normalize)" in card) == settings["normalize"]
        assert f'query {json.dumps(prompts["query"], ensure_ascii=False)}' in card
        assert 'model.encode(["今天天气怎么样"], prompt_name="query")' in card


def test_tasks_that_disagree_are_refused_naming_them_and_the_fix(trained, tmp_path, capsys):
    run = trained[0]
    assert mtl(["export", str(run), "--format", "transformers", "--output",
                str(tmp_path / "both")]) == 2
    error = capsys.readouterr().err
    assert "trainer.json: its contrastive tasks embed_cls, embed_mean pool or normalise " \
           "differently: give --embedding-task NAME" in error and len(error.splitlines()) == 1
    assert mtl(["export", str(run), "--format", "transformers", "--embedding-task", "tnews",
                "--output", str(tmp_path / "tnews")]) == 2
    assert "--embedding-task tnews: not a contrastive task of this run; its contrastive " \
           "tasks: embed_cls, embed_mean" in capsys.readouterr().err
    assert mtl(["export", str(run), "--format", "keras", "--embedding-task", "embed_cls",
                "--output", str(tmp_path / "keras")]) == 2
    assert "--embedding-task is for --format transformers" in capsys.readouterr().err
    assert not any((tmp_path / name).exists() for name in ("both", "tnews", "keras"))


def test_settings_of_runs_with_one_prompt_set_or_none():
    """Tasks that pool alike but prefix differently make two prompt sets: refused too;
    a run without a contrastive task declares sentence-transformers' default, mean."""
    from mtl_framework.saving.model_card import sentence_embedding_lines

    heads = {name: {"family": "contrastive", "config": {"pooling": "mean", "normalize": True,
                                                         "query_prefix": prefix}}
             for name, prefix in (("a", "q: "), ("b", ""))}
    with pytest.raises(UserError, match=r"^trainer.json: its contrastive tasks a, b prefix "
                                        r"queries or passages differently: give "
                                        r"--embedding-task NAME"):
        st.export_settings(heads, "trainer.json")
    assert st.export_settings(heads, "trainer.json", "a") == {
        "pooling": "mean", "normalize": True, "prompts": {"query": "q: "}, "tasks": ["a"]}
    assert st.export_settings({"tnews": {"family": "classification", "config": {}}}, "x") is None
    assert "the pooling was not trained" in "\n".join(sentence_embedding_lines(None))


def test_mtl_encode_of_the_export_is_the_run(trained, tmp_path):
    """`mtl encode FOLDER` reads the folder's sentence-transformers files: the run's vectors."""
    _, exports, expected = trained
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    for task, folder in exports.items():
        for side in ("", "query", "passage"):
            out = tmp_path / f"{task}-{side}.npy"
            assert mtl(["encode", str(folder), "--input", str(texts), "--output", str(out),
                        *(["--side", side] if side else [])]) == 0
            difference = np.abs(np.load(out) - expected[task][side]).max()
            print(f"mtl encode {task} side={side or 'none'}: max |difference| {difference:.2e}")
            assert difference <= TOLERANCE


@pytest.mark.parametrize("venv", list(VENVS))
def test_sentence_transformers_and_transformers_load_the_run(venv, request, tmp_path):
    """SentenceTransformer(DIR).encode (with prompt_name) and AutoModel with pooling by hand
    equal the run's own vectors, in the venv's releases."""
    python = worker_python(venv)  # before the run is trained: a skip costs nothing
    _, exports, expected = request.getfixturevalue("trained")
    jobs = []
    for task, (settings, prompts) in TASKS.items():
        job = tmp_path / f"{task}.json"
        job.write_text(json.dumps({"texts": TEXTS, "pooling": settings["pooling"],
                                   "normalize": settings["normalize"], "prompts": prompts}))
        jobs.append(["encode", str(exports[task]), str(job), str(tmp_path / f"{task}.npz")])
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TRANSFORMERS_OFFLINE="1", HF_HUB_OFFLINE="1",
               PYTHONPATH="")
    result = subprocess.run([python, str(WORKER), "batch", str(tmp_path / "jobs.json")], env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    for task, (settings, prompts) in TASKS.items():
        out = np.load(tmp_path / f"{task}.npz")
        versions = json.loads(str(out["versions"]))
        loaded_prompts = {k: v for k, v in json.loads(str(out["prompts"])).items() if v}
        assert loaded_prompts == prompts and str(out["similarity"]) == "cosine"
        assert json.loads(str(out["modules"]))[1:] == \
            ["Pooling"] + (["Normalize"] if settings["normalize"] else [])
        for name in ("", *prompts):
            ours = expected[task][name]
            if settings["normalize"]:
                assert np.allclose(np.linalg.norm(out[f"st_{name}"], axis=1), 1, atol=1e-6)
            for kind in ("st", "manual"):
                difference = np.abs(out[f"{kind}_{name}"] - ours).max()
                print(f"{venv} {versions} {task} {kind} prompt={name or 'none'}: "
                      f"max |difference| {difference:.2e}")
                assert difference <= TOLERANCE, (venv, task, kind, name)
