"""`mtl export --format transformers` of a run with contrastive tasks is the sentence
embedding the run trained: pooling, normalisation and prompts as its heads record them.

One tiny BERT run (float32) trains tnews and two contrastive tasks that disagree (CLS +
normalised + a query prompt; mean, not normalised, query and passage prompts); each is
exported with `--embedding-task`. The folders are loaded as users load them, in a child
process of each torch venv (tests/interop/sentence_worker.py): `.venv-current` (`make
interop-current`: sentence-transformers 6, transformers 5) and `.venv-torch` (`make
interop-torch`: 3.4.1, 4.50.3); each check skips where its venv is absent. The reference
is the run itself: `Encoder(run, task=...)` (embedding/encode.py)."""
import json
import os
import subprocess

import numpy as np
import pytest

from mtl_framework.cli import main as mtl
from mtl_framework.errors import UserError
from mtl_framework.formats import sentence_transformers as st

from conftest import ONE_LAYER, REPO, afqmc_pairs, write_spec, write_tiny_experiment

WORKER = REPO / "tests" / "interop" / "sentence_worker.py"
# MTL_CURRENT_PYTHON / MTL_TORCH_PYTHON: another interpreter that has the packages
VENVS = {"current": os.environ.get("MTL_CURRENT_PYTHON") or REPO / ".venv-current/bin/python",
         "pinned": os.environ.get("MTL_TORCH_PYTHON") or REPO / ".venv-torch/bin/python"}
BERT = {"architecture": "bert", **ONE_LAYER, "max_positions": 64}
# what each contrastive task trains (its spec's `embedding:`), and the prompts its export holds
TASKS = {
    "embed_cls": ({"pooling": "cls", "normalize": True, "query_prefix": "查询：",
                   "passage_prefix": "", "matryoshka_dims": [16, 8]}, {"query": "查询："}),
    "embed_mean": ({"pooling": "mean", "normalize": False, "query_prefix": "问：",
                    "passage_prefix": "答："}, {"query": "问：", "document": "答："}),
}
SIDE_OF_PROMPT = {"": "", "query": "query", "document": "passage"}  # `mtl encode --side`
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


def run_worker(python, jobs, folder):
    """tests/interop/sentence_worker.py's `batch` of `jobs` (argument lists) in one child of
    `python`, offline and on the CPU, written as folder/jobs.json; it must succeed."""
    (folder / "jobs.json").write_text(json.dumps(jobs))
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TRANSFORMERS_OFFLINE="1", HF_HUB_OFFLINE="1",
               PYTHONPATH="")
    result = subprocess.run([python, str(WORKER), "batch", str(folder / "jobs.json")], env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(run, {task: export folder}, {task: {side: the run's own vectors}})."""
    from mtl_framework.embedding.encode import Encoder

    root = tmp_path_factory.mktemp("sentence")
    write_spec(root / "specs", "afqmc_embed", [
        {"name": name, "type": "contrastive", "max_length": 32, "metric": "cosine_spearman",
         "embedding": {"loss": "cosent", **settings}} for name, (settings, _) in TASKS.items()],
        afqmc_pairs())
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
        for dims in TASKS[task][0].get("matryoshka_dims", []):
            expected[task][f"dim{dims}"] = encoder.encode(TEXTS, dim=dims)
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
        # the record every export keeps: this task's embedding, Matryoshka dims included
        recorded = json.loads((folder / "provenance.json").read_text())["embedding"]
        assert recorded == {task: {"matryoshka_dims": [], **settings}}
        card = (folder / "README.md").read_text(encoding="utf-8")
        assert f"As the contrastive task {task} trained it: pooling `{settings['pooling']}`" in card
        assert ("L2-normalised (2_Normalize)" in card) == settings["normalize"]
        assert f'query {json.dumps(prompts["query"], ensure_ascii=False)}' in card
        assert 'model.encode_query(["今天天气怎么样"])' in card
        assert ('prompt_name="document"' in card) == ("document" in prompts)
        dims = settings.get("matryoshka_dims")
        assert ("Matryoshka: the loss was trained on the leading 16, 8 dims" in card) == \
            bool(dims)
        assert ("does not re-normalise" in card) == bool(dims)


def test_an_export_of_sentence_transformers_5_names_is_read_with_older_folders_names(
        trained, tmp_path):
    """A folder written before sentence-transformers 6 names the passage prompt `passage`:
    `mtl encode` reads it as the document prompt."""
    import shutil

    folder = tmp_path / "older"
    shutil.copytree(trained[1]["embed_mean"], folder)
    config = json.loads((folder / st.ST_CONFIG).read_text())
    config["prompts"] = {"query": "问：", "passage": "答："}
    (folder / st.ST_CONFIG).write_text(json.dumps(config, ensure_ascii=False))
    assert st.folder_prompts(str(folder)) == {"": {"query": "问：", "passage": "答："}}
    config["prompts"] = {"query": "问：", "passage": "旧：", "document": "答："}  # 6 wins
    (folder / st.ST_CONFIG).write_text(json.dumps(config, ensure_ascii=False))
    assert st.folder_prompts(str(folder)) == {"": {"query": "问：", "passage": "答："}}


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
        "pooling": "mean", "normalize": True, "prompts": {"query": "q: "}, "tasks": ["a"],
        "matryoshka_dims": []}
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
    # Matryoshka: the dims the export records, cut and normalised again as trained
    for dims in TASKS["embed_cls"][0]["matryoshka_dims"]:
        out = tmp_path / f"dim{dims}.npy"
        assert mtl(["encode", str(exports["embed_cls"]), "--input", str(texts), "--output",
                    str(out), "--dim", str(dims)]) == 0
        vectors = np.load(out)
        assert vectors.shape == (len(TEXTS), dims)
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-6)
        assert np.abs(vectors - expected["embed_cls"][f"dim{dims}"]).max() <= TOLERANCE
        full = expected["embed_cls"][""][:, :dims]
        assert np.abs(vectors - full / np.linalg.norm(full, axis=1, keepdims=True)).max() <= 1e-6


def test_mtl_encode_dim_past_the_vector_is_refused_and_an_untrained_one_noted(trained, capsys):
    folder = str(trained[1]["embed_cls"])
    assert mtl(["encode", folder, "--text", "花呗", "--dim", "33"]) == 2
    error = capsys.readouterr().err
    assert error.strip() == ("error: --dim 33: the vector has 32 features: give a width from 1 "
                             "to 32 (its Matryoshka dims: 16, 8)")
    assert mtl(["encode", folder, "--text", "花呗", "--dim", "12"]) == 0
    captured = capsys.readouterr()
    assert "--dim 12: not a width the model was trained at (its Matryoshka dims: 16, 8)" in \
        captured.err
    assert len(json.loads(captured.out)["embedding"]) == 12


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
                                   "normalize": settings["normalize"], "prompts": prompts,
                                   "truncate_dims": settings.get("matryoshka_dims", [])}))
        jobs.append(["encode", str(exports[task]), str(job), str(tmp_path / f"{task}.npz")])
    run_worker(python, jobs, tmp_path)
    for task, (settings, prompts) in TASKS.items():
        out = np.load(tmp_path / f"{task}.npz")
        versions = json.loads(str(out["versions"]))
        loaded_prompts = {k: v for k, v in json.loads(str(out["prompts"])).items() if v}
        assert loaded_prompts == prompts and str(out["similarity"]) == "cosine"
        assert json.loads(str(out["modules"]))[1:] == \
            ["Pooling"] + (["Normalize"] if settings["normalize"] else [])
        for name in ("", *prompts):
            ours = expected[task][SIDE_OF_PROMPT[name]]
            if settings["normalize"]:
                assert np.allclose(np.linalg.norm(out[f"st_{name}"], axis=1), 1, atol=1e-6)
            for kind in ("st", "manual"):
                difference = np.abs(out[f"{kind}_{name}"] - ours).max()
                print(f"{venv} {versions} {task} {kind} prompt={name or 'none'}: "
                      f"max |difference| {difference:.2e}")
                assert difference <= TOLERANCE, (venv, task, kind, name)
        # encode_query / encode_document (sentence-transformers 5+) are `--side query|passage`
        for method, side in (("encode_query", "query"), ("encode_document", "passage")):
            if venv == "current" or method in out:
                difference = np.abs(out[method] - expected[task][side]).max()
                print(f"{venv} {task} {method}: max |difference| {difference:.2e}")
                assert difference <= TOLERANCE, (venv, task, method)
        # truncate_dim cuts after Normalize (not unit length): the direction is ours
        for dims in settings.get("matryoshka_dims", []):
            cut = out[f"truncate_{dims}"]
            assert cut.shape == (len(TEXTS), dims)
            assert (np.linalg.norm(cut, axis=1) < 1 - 1e-3).all()  # as the card says
            difference = np.abs(cut / np.linalg.norm(cut, axis=1, keepdims=True)
                                - expected[task][f"dim{dims}"]).max()
            print(f"{venv} {task} truncate_dim={dims} renormalised: max |difference| "
                  f"{difference:.2e}")
            assert difference <= TOLERANCE, (venv, task, dims)


# --- a sentence-transformers folder as the hub ships it, written by sentence-transformers ---

HUB_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"的一是不了人我在有他这中大来上国个到说们为",
              *"子和你地出道也时年得就那要下以生会自着去之过家学对可里后小么心多花呗怎还款查询文档借",
              "hello", "##s"]
HUB_CONFIG = {"vocab_size": len(HUB_TOKENS), "hidden_size": 32, "num_hidden_layers": 1,
              "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64,
              "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
# what each folder declares: (pooling, normalize, prompts)
HUB_MODELS = {"hub_cls": ("cls", True, {"query": "查询：", "document": "文档："}),
              "hub_mean": ("mean", False, {"query": "问："})}
HUB_TEXTS = ["花呗怎么还款", "Hellos 你好", "我们是中国人，他们是学生，这是一个长一些的句子要被截断了吧"]


@pytest.fixture(scope="module")
def hub_folders(tmp_path_factory):
    """{name: (folder, the worker's npz)}: folders `SentenceTransformer.save` of the
    current release wrote (the Transformer at the root, its tokenizer as tokenizer.json
    alone), and "hub_cls_0" the first moved into 0_Transformer/ as sentence-transformers
    1 and 2 saved it."""
    import shutil

    python = worker_python("current")
    root = tmp_path_factory.mktemp("hub")
    jobs = []
    for name, (pooling, normalize, prompts) in HUB_MODELS.items():
        (root / f"{name}.json").write_text(json.dumps({
            "tokens": HUB_TOKENS, "config": HUB_CONFIG, "max_seq_length": 16, "seed": 3,
            "pooling": pooling, "normalize": normalize, "prompts": prompts,
            "texts": HUB_TEXTS}, ensure_ascii=False), encoding="utf-8")
        jobs.append(["make", str(root / name), str(root / f"{name}.json"),
                     str(root / f"{name}.npz")])
    run_worker(python, jobs, root)
    folders = {name: (root / name, np.load(root / f"{name}.npz")) for name in HUB_MODELS}
    nested = root / "hub_cls_0"
    shutil.copytree(root / "hub_cls", nested)
    (nested / "0_Transformer").mkdir()
    modules = json.loads((nested / st.MODULES).read_text())
    for path in list(nested.iterdir()):
        if path.is_file() and path.name not in (st.MODULES, st.ST_CONFIG, "README.md"):
            path.rename(nested / "0_Transformer" / path.name)
    modules[0]["path"] = "0_Transformer"
    (nested / st.MODULES).write_text(json.dumps(modules))
    folders["hub_cls_0"] = (nested, folders["hub_cls"][1])
    return folders


def test_a_hub_folder_is_an_encoder_as_it_stands(hub_folders, tmp_path):
    """`mtl encode DIR` uses the folder's pooling, Normalize, prompts and max_seq_length:
    sentence-transformers' own encode / encode_query / encode_document within 1e-5."""
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(HUB_TEXTS) + "\n", encoding="utf-8")
    assert json.loads(str(hub_folders["hub_cls"][1]["versions"]))["sentence_transformers"] \
        == "6.3.0"
    for name, (folder, theirs) in hub_folders.items():
        pooling, normalize, prompts = HUB_MODELS[name.removesuffix("_0")]
        assert st.folder_settings(str(folder)) == {
            "pooling": pooling, "normalize": normalize,
            "prompts": {"": {"query": prompts["query"], "passage": prompts.get("document", "")}}}
        assert st.folder_length(str(folder)) == 16
        for side, key in (("", "st_"), ("query", "encode_query"), ("passage", "encode_document")):
            out = tmp_path / f"{name}-{side}.npy"
            assert mtl(["encode", str(folder), "--input", str(texts), "--output", str(out),
                        *(["--side", side] if side else [])]) == 0
            difference = np.abs(np.load(out) - theirs[key]).max()
            print(f"mtl encode {name} side={side or 'none'} vs {key}: max |difference| "
                  f"{difference:.2e}")
            assert difference <= TOLERANCE, (name, side)


def test_init_starts_from_a_hub_folder(hub_folders, tmp_path):
    """`backbone: {init: DIR}` of a sentence-transformers folder (root or 0_Transformer):
    the run starts from its weights and keeps its vocab (from tokenizer.json)."""
    from mtl_framework import saving

    for name in ("hub_cls", "hub_cls_0"):
        folder = hub_folders[name][0]
        experiment = write_tiny_experiment(
            tmp_path / f"{name}.yaml", backbone={"init": str(folder)}, tasks=["tnews"],
            precision="float32", max_length=16, steps=1, optimizer={"name": "adamw", "lr": 1e-12})
        run = tmp_path / f"run-{name}"
        assert mtl(["train", str(experiment), "--output", str(run)]) == 0
        assert (run / "vocab.txt").read_text(encoding="utf-8").split() == HUB_TOKENS
        started, trained = ({w.path.split("/", 1)[1]: w.numpy() for w in backbone.weights}
                            for backbone in (saving.load_backbone(str(folder)),
                                             saving.load(str(run)).backbone))
        assert started.keys() == trained.keys()
        assert max(np.abs(started[k] - trained[k]).max() for k in started) < 1e-6
