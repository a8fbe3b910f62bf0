"""The contrastive (sentence-embedding) family, issue 43 point 1, end to end:

1. the losses against a plain-NumPy float64 computation and against sentence-transformers'
   own figures (tests/fixtures/contrastive/, written by bench/contrastive_fixtures.py);
2. the featurizer on the real afqmc / ocnli / cmrc2018 files (skipped without ../shared),
   the `pairs` format on a FlagEmbedding-style file and a user's own spec folder;
3. the registry's one-line errors for `embedding:` and the embedding metrics;
4. contrastive tasks in the mixture: kill-and-resume exactness (TensorFlow, JAX; slow), every
   balancing method, tf.distribute mirrored on two logical CPU devices (and JAX's
   DataParallel on two, slow) equal to one device, a user's pairs task trained and scored;
5. the hard negatives a batch draws.
"""
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from keras import ops

from data_adapters import ReadReport, read_task
from data_adapters.examples import PairExample, SpanQAExample, TextExample
from mtl_framework import losses
from mtl_framework.config import registry
from mtl_framework.families import featurizer_for_task, make_featurizer
from mtl_framework.families.contrastive import text_id
from mtl_framework.families.heads import build_head, task_head
from mtl_framework.tokenizer import Tokenizer, build_vocab, count_units, write_vocab

FIXTURES = Path(__file__).parent / "fixtures" / "contrastive"
ST = json.loads((FIXTURES / "sentence_transformers.json").read_text(encoding="utf-8"))


# --- 1. the losses ------------------------------------------------------------------------------

def unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def numpy_info_nce(queries, positives, negatives, negative_mask, positive_ids, temperature,
                   in_batch_negatives):
    """InfoNCE per query in float64, candidate by candidate: -log softmax of the query's own
    positive over its candidates (every row's positive but a twin of its own, and every real
    hard negative; or only its own positive and negatives)."""
    queries, positives = unit(np.float64(queries)), unit(np.float64(positives))
    negatives = np.float64(negatives)
    out = []
    for i, query in enumerate(queries):
        if in_batch_negatives:
            candidates = [p for j, p in enumerate(positives)
                          if j == i or positive_ids[j] != positive_ids[i]]
            candidates += [unit(negatives[j, n]) for j in range(len(queries))
                           for n in range(negatives.shape[1]) if negative_mask[j, n] > 0]
        else:
            candidates = [positives[i]] + [unit(negatives[i, n]) for n in range(negatives.shape[1])
                                           if negative_mask[i, n] > 0]
        logits = np.array([query @ c for c in candidates]) / temperature
        top = logits.max()
        out.append(top + math.log(np.exp(logits - top).sum()) - query @ positives[i] / temperature)
    return np.array(out)


def numpy_cosent(queries, positives, scores, temperature):
    """log(1 + Σ_{s_i < s_j} exp((cos_i - cos_j) / t)) over the rows with a score."""
    keep = ~np.isnan(scores)
    cosines = np.sum(unit(np.float64(queries)) * unit(np.float64(positives)), axis=-1)[keep] / temperature
    scores = np.float64(scores)[keep]
    terms = [0.0] + [cosines[i] - cosines[j] for i in range(len(scores)) for j in range(len(scores))
                     if scores[i] < scores[j]]
    top = max(terms)
    return top + math.log(sum(math.exp(t - top) for t in terms))


def ours_info_nce(queries, positives, negatives, negative_mask, positive_ids, temperature=0.05,
                  in_batch_negatives=True):
    return np.asarray(losses.info_nce(
        ops.convert_to_tensor(np.float32(queries)), ops.convert_to_tensor(np.float32(positives)),
        ops.convert_to_tensor(np.float32(negatives)), ops.convert_to_tensor(np.float32(negative_mask)),
        ops.convert_to_tensor(np.int32(positive_ids)), temperature, in_batch_negatives))


def ours_cosent(queries, positives, scores, temperature=0.05):
    return float(losses.cosent(ops.convert_to_tensor(np.float32(queries)),
                               ops.convert_to_tensor(np.float32(positives)),
                               ops.convert_to_tensor(np.float32(scores)), temperature))


def random_rows(seed, rows=5, negatives=3, hidden=8):
    rng = np.random.default_rng(seed)
    queries = rng.normal(size=(rows, hidden))
    positives = queries + rng.normal(size=(rows, hidden))
    return queries, positives, rng.normal(size=(rows, negatives, hidden))


@pytest.mark.parametrize("in_batch", [True, False], ids=["in_batch", "own_only"])
def test_info_nce_equals_numpy_with_padded_hard_negatives(in_batch):
    queries, positives, negatives = random_rows(0)
    mask = np.array([[1, 1, 1], [1, 0, 0], [0, 0, 0], [1, 1, 0], [1, 0, 0]], np.float32)
    negatives[mask == 0] = 50.0  # padding rows: large, so counting one would show
    ids = np.arange(5)
    expected = numpy_info_nce(queries, positives, negatives, mask, ids, 0.05, in_batch)
    got = ours_info_nce(queries, positives, negatives, mask, ids, 0.05, in_batch)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    # the padding is left out: the same rows without it give the same losses
    unpadded = ours_info_nce(queries, positives, np.where(mask[..., None] > 0, negatives, 0.0),
                             mask, ids, 0.05, in_batch)
    np.testing.assert_allclose(unpadded, got, rtol=1e-6)
    assert got.shape == (5,)
    # own candidates only: row 2 has nothing but its positive, so nothing to learn
    assert (got[2] == 0) == (not in_batch) and np.all(np.delete(got, 2) > 0)


def test_info_nce_masks_a_duplicated_positive_of_another_row():
    queries, positives, negatives = random_rows(1, negatives=1)
    positives = queries + 0.2 * (positives - queries)  # near their queries: the twin counts
    positives[3] = positives[1]  # one passage answering two queries (alike)
    queries[3] = 0.9 * queries[1] + 0.1 * queries[3]
    ids = np.array([10, 11, 12, 11, 14])
    mask = np.ones((5, 1), np.float32)
    got = ours_info_nce(queries, positives, negatives, mask, ids, 0.05)
    np.testing.assert_allclose(got, numpy_info_nce(queries, positives, negatives, mask, ids, 0.05, True),
                               rtol=1e-5, atol=1e-5)
    # unmasked (all ids distinct), rows 1 and 3 count the shared passage as a negative too
    unmasked = ours_info_nce(queries, positives, negatives, mask, np.arange(5), 0.05)
    assert np.all(unmasked[[1, 3]] > got[[1, 3]] + 1e-3)
    np.testing.assert_allclose(unmasked[[0, 2, 4]], got[[0, 2, 4]], rtol=1e-6)


def test_info_nce_temperature_scales_the_logits():
    queries, positives, negatives = random_rows(2, negatives=2)
    mask, ids = np.ones((5, 2), np.float32), np.arange(5)
    for temperature in (0.02, 0.05, 1.0):
        np.testing.assert_allclose(
            ours_info_nce(queries, positives, negatives, mask, ids, temperature),
            numpy_info_nce(queries, positives, negatives, mask, ids, temperature, True),
            rtol=1e-5, atol=1e-5)


def test_cosent_equals_numpy_and_skips_rows_without_a_score():
    queries, positives, _ = random_rows(3, rows=7)
    scores = np.array([0.2, np.nan, 1.0, 0.5, np.nan, 0.5, 0.9], np.float32)
    got = ours_cosent(queries, positives, scores)
    assert got == pytest.approx(numpy_cosent(queries, positives, scores, 0.05), rel=1e-5, abs=1e-5)
    keep = ~np.isnan(scores)
    assert got == pytest.approx(ours_cosent(queries[keep], positives[keep], scores[keep]), rel=1e-6)
    # no pair with two scores: log(1) = 0
    assert ours_cosent(queries[:2], positives[:2], np.array([np.nan, 0.3], np.float32)) == 0.0


def st_rows():
    return tuple(np.array(ST[key], np.float32) for key in ("anchors", "positives", "negatives"))


def test_fixture_names_sentence_transformers_and_its_loss_files():
    assert ST["library"] == "sentence-transformers" and ST["versions"]["sentence-transformers"] == "3.4.1"
    paths = {m["path"] for m in ST["mirrors"]}
    assert {"sentence_transformers/losses/MultipleNegativesRankingLoss.py",
            "sentence_transformers/losses/CoSENTLoss.py"} <= paths
    assert ST["settings"]["scale"] == 20.0  # = our default temperature 0.05


def test_info_nce_equals_sentence_transformers_multiple_negatives_ranking_loss():
    anchors, positives, negatives = st_rows()
    rows, ids = len(anchors), np.arange(len(anchors))
    pairs = ours_info_nce(anchors, positives, np.zeros((rows, 0, anchors.shape[1])),
                          np.zeros((rows, 0)), ids, 1 / ST["settings"]["scale"])
    assert pairs.mean() == pytest.approx(ST["figures"]["mnrl_pairs"], abs=1e-5)
    # (anchor, positive, negative) columns: in-batch InfoNCE with one hard negative
    triplets = ours_info_nce(anchors, positives, negatives[:, None], np.ones((rows, 1)), ids)
    assert triplets.mean() == pytest.approx(ST["figures"]["mnrl_triplets"], abs=1e-5)


def test_cosent_equals_sentence_transformers_cosent_loss_with_unscored_rows_between():
    anchors, positives, _ = st_rows()
    scores = np.array(ST["scores"], np.float32)
    assert ours_cosent(anchors, positives, scores) == pytest.approx(ST["figures"]["cosent"], abs=1e-5)
    # rows without a score (NaN) anywhere in the batch change nothing
    order = [0, 1, None, 2, 3, None, 4, 5]
    pick = lambda a, filler: np.stack([a[i] if i is not None else filler for i in order])  # noqa: E731
    mixed = ours_cosent(pick(anchors, anchors[0] * -3), pick(positives, positives[1]),
                        np.array([scores[i] if i is not None else np.nan for i in order], np.float32))
    assert mixed == pytest.approx(ST["figures"]["cosent"], abs=1e-5)


def contrastive_head(**settings):
    return build_head("contrastive", None, len(ST["anchors"][0]), **settings)


def test_head_matryoshka_is_sentence_transformers_sum_over_the_dims_divided_by_their_count():
    anchors, positives, negatives = st_rows()
    vectors = ops.convert_to_tensor(np.stack([anchors, positives, negatives], axis=1))  # [B, 3, H]
    batch = {"text_mask": ops.ones((len(anchors), 3)), "positive_id": ops.arange(len(anchors)),
             "score": ops.convert_to_tensor(np.full(len(anchors), np.nan, np.float32))}
    dims = ST["settings"]["matryoshka_dims"]
    plain = float(contrastive_head().compute_task_loss(vectors, batch))
    assert plain == pytest.approx(ST["figures"]["mnrl_triplets"], abs=1e-5)
    matryoshka = float(contrastive_head(matryoshka_dims=dims).compute_task_loss(vectors, batch))
    assert matryoshka == pytest.approx(ST["figures"]["matryoshka_mnrl_triplets"] / len(dims), abs=1e-5)
    assert abs(matryoshka - plain) > 1e-2  # the smaller dims do count


def test_head_cosent_equals_sentence_transformers_cosent_loss():
    anchors, positives, _ = st_rows()
    vectors = ops.convert_to_tensor(np.stack([anchors, positives], axis=1))
    batch = {"text_mask": ops.ones((len(anchors), 2)), "positive_id": ops.arange(len(anchors)),
             "score": ops.convert_to_tensor(np.array(ST["scores"], np.float32))}
    loss = float(contrastive_head(loss="cosent").compute_task_loss(vectors, batch))
    assert loss == pytest.approx(ST["figures"]["cosent"], abs=1e-5)


# --- 2. the featurizer on real data, the pairs format, a user's own spec ---------------------------

def tokenizer_for(texts, folder):
    write_vocab(build_vocab(count_units(texts), max_size=3000), folder / "vocab.txt")
    return Tokenizer(str(folder / "vocab.txt"))


def token_rows(features, row):
    """Each stored text of an example (query, positive, negatives...) as its token ids."""
    splits, token_splits = features["choices.splits"], features.splits("token_ids")
    return [list(features["token_ids"][token_splits[t]:token_splits[t + 1]])
            for t in range(splits[row], splits[row + 1])]


def featurized(task, split, data_root, folder):
    """(examples, read report, features, tokenizer) of one split of a registry task."""
    report = ReadReport()
    examples = list(read_task(task, split, data_root, report))
    texts = [t for e in examples for t in ((e.question, e.context) if isinstance(e, SpanQAExample)
                                           else (e.text, e.text_b))]
    tokenizer = tokenizer_for(texts, folder)
    features = featurizer_for_task(task, tokenizer, data_root).featurize(examples)
    return examples, report, features, tokenizer


@pytest.fixture(scope="module")
def builtin():
    return registry.load_registry()


def test_afqmc_sts_reads_every_pair_with_its_label_as_the_score(shared_data, builtin, tmp_path):
    task = builtin.tasks["afqmc_sts"]
    assert task.embedding == {"loss": "cosent"}
    lines = [line.rstrip("\n").split("\t") for line in
             (shared_data / "afqmc" / "dev.txt").read_text(encoding="utf-8").splitlines()]
    examples, read, features, tokenizer = featurized(task, "dev", shared_data, tmp_path)
    assert len(features) == len(lines) == 4316 and read.as_dict()["skipped_total"] == 0
    np.testing.assert_array_equal(features["score"], [float(fields[2]) for fields in lines])
    report = features.meta["report"]
    assert report["dropped"] == {} and report["unlabelled"] == 0
    # each text alone, [CLS] text [SEP], query then positive; no negatives stored
    assert np.all(np.diff(features["choices.splits"]) == 2)
    for row in (0, 1234, len(lines) - 1):
        query, positive = lines[row][:2]
        assert token_rows(features, row) == [tokenizer.encode(query, max_length=64)[0],
                                             tokenizer.encode(positive, max_length=64)[0]]
        assert features["positive_id"][row] == text_id(positive)
    batch = features.batch([0, 1, 2])
    assert batch["token_ids"].shape[:2] == (3, 2) and batch["text_mask"].tolist() == [[1, 1]] * 3


def test_scored_pairs_under_infonce_keep_the_positive_ones(shared_data, builtin, tmp_path):
    import dataclasses

    task = dataclasses.replace(builtin.tasks["afqmc_sts"], embedding={"loss": "infonce"})
    lines = (shared_data / "afqmc" / "dev.txt").read_text(encoding="utf-8").splitlines()
    positives = sum(1 for line in lines if line.split("\t")[2] == "1")
    _, _, features, _ = featurized(task, "dev", shared_data, tmp_path)
    assert len(features) == positives
    assert features.meta["report"]["dropped"] == {
        "score below positive_score (not a positive pair)": len(lines) - positives}
    assert np.all(features["score"] == 1.0)


def test_ocnli_pairs_skip_neutral_and_score_entailment_one(shared_data, builtin, tmp_path):
    task = builtin.tasks["ocnli_pairs"]
    lines = (shared_data / "ocnli" / "dev.json").read_text(encoding="utf-8").splitlines()
    raw = [json.loads(line) for line in lines]
    kept = [r for r in raw if r["label"] in ("entailment", "contradiction")]
    examples, read, features, _ = featurized(task, "dev", shared_data, tmp_path)
    skipped = read.as_dict()["skipped"]
    assert skipped["label 'neutral' is in skip_labels"]["count"] == sum(r["label"] == "neutral" for r in raw)
    assert skipped["label '-' is in skip_labels"]["count"] == sum(r["label"] == "-" for r in raw) == 50
    assert len(features) == len(kept) == 1847
    np.testing.assert_array_equal(features["score"], [float(r["label"] == "entailment") for r in kept])
    assert [e.text_b for e in examples[:3]] == [r["sentence2"] for r in kept[:3]]


def cmrc_questions(path):
    """[(question id, passage, answered)] of a SQuAD file, in file order; answered: some
    answer's answer_start points at its text."""
    out = []
    for article in json.loads(path.read_text(encoding="utf-8"))["data"]:
        for paragraph in article["paragraphs"]:
            context = paragraph["context"]
            for qa in paragraph["qas"]:
                answered = any(context[a["answer_start"]:a["answer_start"] + len(a["text"])] == a["text"]
                               for a in qa["answers"])
                out.append((qa["id"], context, answered))
    return out


def test_cmrc2018_retrieval_pairs_answered_questions_with_their_passage(shared_data, builtin, tmp_path):
    import dataclasses

    task = builtin.tasks["cmrc2018_retrieval"]
    questions = cmrc_questions(shared_data / "cmrc2018" / "dev.json")
    answered = [(qid, context) for qid, context, ok in questions if ok]
    assert len(questions) == 3219 and len(answered) == 3216
    examples, read, features, _ = featurized(task, "dev", shared_data, tmp_path)
    assert [e.id for e in examples] == [qid for qid, _ in answered]  # the reader drops the 3
    assert len(features) == 3216 and features.meta["report"]["dropped"] == {}
    ids = features["positive_id"]
    np.testing.assert_array_equal(ids, [text_id(context) for _, context in answered])
    # the questions of one passage share its id (never each other's negative); passages differ
    by_passage = {}
    for (_, context), id_ in zip(answered, ids):
        by_passage.setdefault(context, set()).add(int(id_))
    assert all(len(found) == 1 for found in by_passage.values())
    assert len({found.pop() for found in by_passage.values()}) == len(by_passage) > 800
    assert ids[0] == ids[1] and examples[0].context == examples[1].context
    # read as scoring reads it (unanswered questions kept), the featurizer drops them itself
    scored = dataclasses.replace(task, options={**task.options, "unlocated_questions": "score"})
    every = list(read_task(scored, "dev", shared_data))
    assert len(every) == 3219
    unanswered = [e for e in every if not e.answers]
    assert sorted(e.id for e in unanswered) == sorted(qid for qid, _, ok in questions if not ok)
    some = unanswered + every[:5]  # (the whole split again would double the test's time)
    features = featurizer_for_task(scored, tokenizer_for(["天"], tmp_path), shared_data).featurize(some)
    assert len(features) == 5
    assert features.meta["report"]["dropped"] == {"no answer in the passage (not a positive pair)": 3}


FLAG_RECORDS = [
    {"query": "北京的天气", "pos": ["北京今天晴", "北京明天多云"],
     "neg": ["上海下雨", "广州很热", "天津有风"]},
    {"query": "苹果多少钱", "pos": "苹果五块一斤"},
    {"pos": ["没有问题的记录"]},  # no query: skipped with its line
    {"query": "香蕉", "pos": "黄色的水果", "neg": "不是列表也行"},
    {"query": "西瓜", "pos": "夏天", "neg": [1, 2]},  # negatives not strings: skipped
]


def write_flag_file(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in FLAG_RECORDS)
                    + "not json\n", encoding="utf-8")
    return path


def test_pairs_format_reads_flagembedding_files(tmp_path):
    from data_adapters import read_files

    path = write_flag_file(tmp_path / "train.jsonl")
    report = ReadReport()
    examples = list(read_files("pairs", [path], {}, {"query": "query", "positive": "pos",
                                                     "negatives": "neg", "score": None, "id": None},
                               "contrastive", None, report))
    negatives = ("上海下雨", "广州很热", "天津有风")
    assert examples == [PairExample("北京的天气", "北京今天晴", negatives),
                        PairExample("北京的天气", "北京明天多云", negatives),
                        PairExample("苹果多少钱", "苹果五块一斤"),
                        PairExample("香蕉", "黄色的水果", ("不是列表也行",))]
    skipped = report.as_dict()["skipped"]
    assert skipped["query ('query') missing or not a non-empty string"]["first"] == [f"{path}:3"]
    assert skipped["negatives ('neg') not a list of strings"]["first"] == [f"{path}:5"]
    assert sum(s["count"] for s in skipped.values()) == 3 == report.as_dict()["skipped_total"]
    assert any(place == f"{path}:6" for s in skipped.values() for place in s["first"])


USER_SPEC = """\
dataset: my_pairs
description: a user's own FlagEmbedding file
format: pairs
files:
  train: my_pairs/train.jsonl
tasks:
  - name: my_retrieval
    type: contrastive
    max_length: 24
    metric: retrieval
    embedding:
      hard_negatives: 2
      query_prefix: "查询："
      temperature: 0.02
      pooling: mean
"""


def test_a_users_spec_folder_makes_a_pairs_task_through_yaml_alone(tmp_path):
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "my_pairs.yaml").write_text(USER_SPEC, encoding="utf-8")
    write_flag_file(tmp_path / "data" / "my_pairs" / "train.jsonl")
    task = registry.load_registry([tmp_path / "specs"]).tasks["my_retrieval"]
    assert (task.type, task.format, task.metric) == ("contrastive", "pairs", "retrieval")
    examples = list(read_task(task, "train", tmp_path / "data"))
    assert len(examples) == 4
    tokenizer = tokenizer_for([t for e in examples for t in (e.query, e.positive, *e.negatives)]
                              + ["查询："], tmp_path)
    features = featurizer_for_task(task, tokenizer, tmp_path / "data").featurize(examples)
    assert features.meta["settings"] == {"loss": "infonce", "hard_negatives": 2, "positive_score": 1.0,
                                         "query_prefix": "查询：", "passage_prefix": ""}
    rows = token_rows(features, 0)
    assert rows[0] == tokenizer.encode("查询：北京的天气", max_length=24)[0]  # the query's prefix
    assert rows[1:] == [tokenizer.encode(t, max_length=24)[0]
                        for t in ("北京今天晴", "上海下雨", "广州很热", "天津有风")]
    batch = features.batch([0, 2], np.random.default_rng(0))
    assert batch["token_ids"].shape[:2] == (2, 4)  # query, positive, 2 of the 3 negatives
    assert batch["text_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    head = task_head(task, None, 16)  # the head `mtl train` builds for it
    assert (head.temperature, head.pooling, head.in_batch_negatives, head.loss) == \
        (0.02, "mean", True, "infonce")


def test_matryoshka_dims_wider_than_the_backbone_are_refused_before_the_run(tmp_path, capsys):
    from mtl_framework.cli import main as mtl

    from conftest import TINY_BACKBONE

    (tmp_path / "specs").mkdir()
    spec = USER_SPEC.replace("pooling: mean", "pooling: mean\n      matryoshka_dims: [8, 4096]")
    (tmp_path / "specs" / "my_pairs.yaml").write_text(spec, encoding="utf-8")
    write_flag_file(tmp_path / "data" / "my_pairs" / "train.jsonl")
    experiment = tmp_path / "experiment.json"
    experiment.write_text(json.dumps({
        "data_root": str(tmp_path / "data"), "task_specs": [str(tmp_path / "specs")],
        "backbone": TINY_BACKBONE, "tasks": ["my_retrieval"], "steps": 1}), encoding="utf-8")
    assert mtl(["train", str(experiment), "--output", str(tmp_path / "run")]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert error == [f"error: {tmp_path / 'specs' / 'my_pairs.yaml'}:7: task 'my_retrieval': "
                     f"embedding.matryoshka_dims [4096] exceed the backbone's hidden size "
                     f"{TINY_BACKBONE['hidden_size']}: give dimensions up to "
                     f"{TINY_BACKBONE['hidden_size']}"]
    assert not (tmp_path / "run").exists()


# --- 3. the registry's errors ------------------------------------------------------------------------

BAD_SPEC = """\
dataset: bad_pairs
format: pairs
files:
  train: bad/train.jsonl
tasks:
  - name: bad_settings
    type: contrastive
    max_length: 32
    metric: retrieval
    embedding:
      tempreature: 0.05
      loss: softmax
      pooling: max
      hard_negatives: -1
  - name: bad_metric
    type: contrastive
    max_length: 32
    metric: accuracy
"""
BAD_TEXT_SPEC = """\
dataset: bad_text
format: delimited
files:
  train: bad/train.tsv
fields:
  text: 0
  text_b: 1
  label: 2
tasks:
  - name: matching_with_settings
    type: matching
    labels: ["0", "1"]
    max_length: 32
    metric: accuracy
    embedding: {loss: cosent}
  - name: classification_on_embeddings
    type: classification
    labels: ["0", "1"]
    max_length: 32
    metric: cosine_spearman
"""


def test_embedding_spec_errors_are_one_line_each_with_file_line_and_fix(tmp_path, capsys):
    from mtl_framework.cli import main as mtl

    (tmp_path / "bad.yaml").write_text(BAD_SPEC, encoding="utf-8")
    (tmp_path / "bad_text.yaml").write_text(BAD_TEXT_SPEC, encoding="utf-8")
    bad, text = tmp_path / "bad.yaml", tmp_path / "bad_text.yaml"
    settings = ", ".join(["loss", "temperature", "in_batch_negatives", "pooling", "normalize",
                          "matryoshka_dims", "cached_chunk", "hard_negatives", "positive_score",
                          "query_prefix", "passage_prefix"])
    expected = [
        f"{bad}:11: task 'bad_settings': embedding: unknown setting 'tempreature' (did you mean "
        f"'temperature'?); allowed: {settings}",
        f"{bad}:12: task 'bad_settings': embedding.loss must be one of infonce, cosent, got 'softmax'",
        f"{bad}:13: task 'bad_settings': embedding.pooling must be one of cls, mean, got 'max'",
        f"{bad}:14: task 'bad_settings': embedding.hard_negatives must be a whole number >= 0, got -1",
        f"{bad}:18: task 'bad_metric': a contrastive task is scored on its embeddings: metric "
        "cosine_spearman / pair_classification / retrieval / reranking, not accuracy",
        f"{text}:15: task 'matching_with_settings': `embedding:` settings apply to type contrastive "
        "only, not matching; remove them",
        f"{text}:20: task 'classification_on_embeddings': metric cosine_spearman scores the "
        "embeddings of contrastive tasks, not a classification task's outputs: give it another "
        "metric, or make it type contrastive",
    ]
    assert [str(e) for e in registry.validate_paths([tmp_path])] == expected
    with pytest.raises(registry.SpecValidationError):
        registry.load_registry([tmp_path])
    assert mtl(["tasks", "validate", str(tmp_path)]) != 0
    out = capsys.readouterr()
    printed = (out.out + out.err).splitlines()
    assert all(f"error: {line}" in printed for line in expected), printed


# --- 5. the hard negatives a batch draws ---------------------------------------------------------------

NEGATIVES = ("甲乙", "丙丁", "戊己", "庚辛", "壬癸")


@pytest.fixture(scope="module")
def negatives_features(tmp_path_factory):
    examples = [PairExample("天地", "日月", NEGATIVES), PairExample("山水", "风云", ("花草",)),
                PairExample("东西", "南北"), TextExample("春夏", "秋冬", 1.0)]
    folder = tmp_path_factory.mktemp("negatives")
    tokenizer = tokenizer_for(["天地日月山水风云花草东西南北春夏秋冬", *NEGATIVES], folder)
    features = make_featurizer("contrastive", tokenizer, 16, task="toy", hard_negatives=2).featurize(examples)
    texts = {tuple(tokenizer.encode(t, max_length=16)[0]): t for t in
             ["天地", "日月", "山水", "风云", "花草", "东西", "南北", "春夏", "秋冬", *NEGATIVES]}
    return features, texts


def batch_texts(batch, texts):
    return [[texts[tuple(int(i) for i in ids if i)] if ids.any() else None for ids in row]
            for row in batch["token_ids"]]


def test_without_rng_a_batch_takes_the_first_hard_negatives(negatives_features):
    features, texts = negatives_features
    batch = features.batch([0, 1, 2, 3])
    assert batch_texts(batch, texts) == [["天地", "日月", "甲乙", "丙丁"], ["山水", "风云", "花草", None],
                                         ["东西", "南北", None, None], ["春夏", "秋冬", None, None]]
    assert batch["text_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 0, 0]]
    np.testing.assert_array_equal(batch["score"], [np.nan, np.nan, np.nan, 1.0])
    assert batch["positive_id"].tolist() == [text_id(t) for t in ("日月", "风云", "南北", "秋冬")]


def test_with_rng_a_batch_draws_the_set_number_deterministically(negatives_features):
    features, texts = negatives_features
    drawn = []
    for seed in range(200):
        rows = batch_texts(features.batch([0, 1], np.random.default_rng(seed)), texts)
        assert rows[1] == ["山水", "风云", "花草", None]  # one stored: nothing to draw
        query, positive, *negatives = rows[0]
        assert (query, positive) == ("天地", "日月") and len(set(negatives)) == 2
        assert negatives == sorted(negatives, key=NEGATIVES.index)  # kept in stored order
        drawn.append(tuple(negatives))
    again = [tuple(batch_texts(features.batch([0, 1], np.random.default_rng(seed)), texts)[0][2:])
             for seed in range(200)]
    assert again == drawn  # a seed gives its draw again
    assert set(drawn) == set(itertools.combinations(NEGATIVES, 2))  # every pair can come


def test_stored_negatives_are_capped_and_counted(tmp_path):
    tokenizer = tokenizer_for(["问答负例"], tmp_path)
    many = tuple("负" * (1 + i % 3) + "例" for i in range(70))
    features = make_featurizer("contrastive", tokenizer, 8, task="toy", hard_negatives=0).featurize(
        [PairExample("问", "答", many), PairExample("问", "答", many[:3])])
    assert np.diff(features["choices.splits"]).tolist() == [2 + 64, 2 + 3]
    assert features.meta["report"]["truncated"] == {"over 64 negatives (the first kept)": 1}
    batch = features.batch([0, 1], np.random.default_rng(0))
    assert batch["token_ids"].shape[:2] == (2, 2)  # hard_negatives 0: query and positive only


# --- 4. in the mixture -----------------------------------------------------------------------------------

MIXED = ["tnews", "afqmc_sts", "cmrc2018_retrieval"]  # classification, CoSENT, in-batch InfoNCE
RESUME_STEPS, RESUME_EVERY = 12, 4


def killed_and_resumed(tmp_path, python=None):
    """tests/test_resume.py's check on MIXED: run A uninterrupted, run B SIGKILLed after its
    first checkpoint and resumed; both end with the same named state (each within 1e-6)."""
    import run_harness as harness

    run = (lambda *a, **k: harness.mtl(*a, python=python, **k)) if python else harness.mtl
    experiment = harness.write_experiment(tmp_path / "experiment.yaml",
                                          **{**harness.RESUMABLE, "tasks": MIXED},
                                          steps=RESUME_STEPS, checkpoint_every=RESUME_EVERY)
    a, b = tmp_path / "A", tmp_path / "B"
    uninterrupted = run("train", experiment, "--output", a, log=tmp_path / "A.log")
    killed = run("train", experiment, "--output", b, log=tmp_path / "B.log")
    steps_at_kill = harness.kill_between_checkpoints(killed, b, RESUME_EVERY, 300)
    assert steps_at_kill and RESUME_STEPS not in steps_at_kill
    assert harness.updates_logged(b) < RESUME_STEPS
    harness.finished(uninterrupted, tmp_path / "A.log")
    harness.finished(run("train", experiment, "--output", b, "--resume", log=tmp_path / "B.log"),
                     tmp_path / "B.log")
    assert f"resumed from {b / 'checkpoints'}" in (tmp_path / "B.log").read_text(errors="replace")
    trainer, _, differences = harness.assert_same_final_state(a, b, RESUME_STEPS, steps_at_kill)
    assert trainer["step"] == RESUME_STEPS
    logged = [json.loads(line) for line in (a / "metrics.jsonl").read_text().splitlines()]
    for task in MIXED:  # every task trained, with finite losses
        losses_of = [log["tasks"][task]["loss"] for log in logged if task in log["tasks"]]
        assert losses_of and all(math.isfinite(v) for v in losses_of), task
    return differences


@pytest.mark.slow
def test_mixed_run_with_contrastive_tasks_killed_and_resumed_equals_uninterrupted(tmp_path):
    killed_and_resumed(tmp_path)


@pytest.mark.slow
def test_mixed_run_on_jax_killed_and_resumed_equals_uninterrupted(tmp_path):
    from run_harness import JAX_PYTHON

    if not JAX_PYTHON.exists():
        pytest.skip(".venv-jax is absent (make interop-jax)")
    killed_and_resumed(tmp_path, python=JAX_PYTHON)


# Every method of mixing/balancing.py's table, each in one pair (normalize x weights).
BALANCINGS = [{"normalize": "none", "weights": "fixed"},
              {"normalize": "gradient_norm", "weights": "loss_rate"},
              {"normalize": "loss_norm", "weights": "dwa", "window": 1},
              {"normalize": "initial_loss", "weights": "uncertainty"},
              {"normalize": "gradient_norm", "weights": "rlw"},
              {"normalize": "gradient_norm", "weights": "gradnorm"},
              {"normalize": "gradient_norm", "weights": "pcgrad"}]


def mixed_micro_batches(tmp_path):
    """Per update: a classification batch, an in-batch InfoNCE batch with one hard negative
    per row (one row without: padded), a CoSENT batch of graded scores."""
    from conftest import classification_batch

    texts = ["天地日月", "山水风云", "东西南北", "春夏秋冬", "甲乙丙丁", "花草树木", "上下左右"]
    tokenizer = tokenizer_for(texts, tmp_path)
    pairs = [PairExample(texts[i], texts[i + 1][::-1], (texts[(i + 3) % 7],) if i else ()) for i in range(6)]
    scored = [TextExample(texts[i], texts[(i * 2) % 7], float(i % 4)) for i in range(6)]
    infonce = make_featurizer("contrastive", tokenizer, 8, task="pairs").featurize(pairs)
    cosent = make_featurizer("contrastive", tokenizer, 8, task="sts", loss="cosent").featurize(scored)
    rng = np.random.default_rng(0)
    return tokenizer.vocab_size, [
        [("cls", classification_batch(update, 3)), ("pairs", infonce.batch(rng.permutation(6)[:4], rng)),
         ("sts", cosent.batch(rng.permutation(6)[:4], rng))] for update in range(2)]


def test_every_balancing_method_trains_a_mixture_with_contrastive_tasks(tmp_path):
    import keras

    from mtl_framework import RoFormerV2Backbone
    from mtl_framework.mixing.balancing import METHODS
    from mtl_framework.step.model import MultiTaskModel

    covered = {name for config in BALANCINGS for name in (config["normalize"], config["weights"])}
    assert covered == set(METHODS)
    vocab, updates = mixed_micro_batches(tmp_path)
    hidden = 16
    for config in BALANCINGS:
        keras.utils.set_random_seed(0)
        backbone = RoFormerV2Backbone(vocab_size=max(vocab, 64), num_layers=1, hidden_size=hidden,
                                      num_heads=2, intermediate_size=32, dropout=0.0)
        backbone.build()
        heads = {"cls": build_head("classification", 3, hidden, name="cls"),
                 "pairs": build_head("contrastive", None, hidden, name="pairs"),
                 "sts": build_head("contrastive", None, hidden, name="sts", loss="cosent")}
        model = MultiTaskModel(backbone, heads, tasks_per_update=3, balancing=config, seed=7)
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1))
        model.build_all()
        before = [np.array(v.numpy()) for v in model.backbone_variables]
        for micro_batches in updates:
            logs = model.run_update(micro_batches)
            assert [log["task"] for log in logs] == ["cls", "pairs", "sts"], config
            assert all(log["finite"] and math.isfinite(log["loss"]) and log["loss"] > 0
                       for log in logs), (config, logs)
        after = [np.array(v.numpy()) for v in model.backbone_variables]
        assert all(np.isfinite(v).all() for v in after), config
        assert max(float(np.abs(a - b).max()) for a, b in zip(after, before)) > 0, config
        assert all(math.isfinite(w) for w in model.balancing.weights().values()), config
        model.close()


# An update is -lr x the gradient, so a gradient that differs shows as it is (Adam's moments
# would magnify rounding in rows of tiny gradients, e.g. the token embedding's).
PLAIN_SGD = {"name": "sgd", "lr": 0.5, "final_lr_fraction": 1.0}

# tf.distribute's mirrored strategy over two logical CPU devices (set before TensorFlow starts,
# so in a child), then tests/distributed_worker.py's training.
MIRRORED_CHILD = """\
import sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
sys.path.insert(0, "tests")
from distributed_worker import main
main(*sys.argv[1:])
"""


# cmrc2018_retrieval trained by the cached-gradient step, 4 texts a chunk
CACHED_SPEC = """\
dataset: cmrc2018_cached
format: squad
files:
  train: cmrc2018/train.json
tasks:
  - name: cmrc2018_retrieval_cached
    type: contrastive
    max_length: 256
    metric: retrieval
    embedding:
      cached_chunk: 4
"""


@pytest.mark.parametrize("step", ["plain", "cached"])
def test_mirrored_on_two_devices_equals_one_process_with_contrastive_tasks(tmp_path, step):
    """Two replicas split each micro-batch's rows; a contrastive loss couples the rows (in-batch
    negatives, CoSENT's pairs), yet the update must be the one-process update; also with the
    cached-gradient step (its chunks' while loops inside each replica)."""
    import os
    import subprocess
    import sys

    from run_harness import TWO_WORKERS, checkpoint_state, load_state, write_experiment

    from mtl_framework.loop.run import Run

    steps, tasks = 2, MIXED[1:]  # the two contrastive tasks (tnews: tests/test_distributed.py)
    specs = []
    if step == "cached":
        (tmp_path / "specs").mkdir()
        (tmp_path / "specs" / "cmrc2018_cached.yaml").write_text(CACHED_SPEC, encoding="utf-8")
        tasks, specs = ["afqmc_sts", "cmrc2018_retrieval_cached"], [str(tmp_path / "specs")]
    experiment = write_experiment(
        tmp_path / "experiment.yaml", **{**TWO_WORKERS, "tasks": tasks, "tasks_per_update": 2,
                                         "batch_size": 7, "max_length": 16, "steps": steps,
                                         "eval_every": 0, "optimizer": PLAIN_SGD,
                                         "task_specs": specs})
    Run(str(experiment), str(tmp_path / "single"), log=lambda *a: None).train()  # caches features
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
    child = subprocess.run([sys.executable, "-c", MIRRORED_CHILD, str(experiment), str(tmp_path / "mirrored"),
                            "mirrored", str(steps), str(tmp_path / "mirrored.npz")],
                           cwd=Path(__file__).resolve().parents[1], env=env, capture_output=True,
                           text=True, timeout=600)
    assert child.returncode == 0, (child.stdout + child.stderr)[-3000:]
    logged = [json.loads(line) for line in (tmp_path / "mirrored" / "metrics.jsonl").read_text().splitlines()]
    assert {task for log in logged for task in log["tasks"]} == set(tasks)
    mirrored, single = load_state(tmp_path / "mirrored.npz"), checkpoint_state(tmp_path / "single", steps)
    assert len(mirrored) == len(single)
    difference = max(float(np.abs(a.astype("float64") - b).max()) for a, b in zip(mirrored, single))
    print(f"max |mirrored on 2 CPU devices - one process| after {steps} updates: {difference:.3g}")
    # each replica on its own rows instead (in-batch negatives per replica) differed by 0.13
    assert difference <= 1e-5


def train_users_pairs_task(tmp_path, metric):
    """`mtl train` on an experiment naming only a spec folder and its pairs task (12 passages,
    each with 3 negatives, + a second query of passage 0 without), dev = train; its records
    and its last evaluation of the task."""
    from mtl_framework.cli import main as mtl

    from conftest import ONE_LAYER

    rng = np.random.default_rng(0)
    hanzi = [chr(0x4E00 + i) for i in range(0, 400, 7)]
    passages = ["".join(rng.choice(hanzi, 10)) for _ in range(12)]
    records = [{"query": p[:4] + "？", "pos": p, "neg": [passages[(i + k) % 12] for k in (1, 2, 3)]}
               for i, p in enumerate(passages)]
    records.append({"query": passages[0][2:6], "pos": passages[0]})  # a second query of passage 0
    for split, rows in (("train", records), ("dev", records)):
        path = tmp_path / "data" / "my_pairs" / f"{split}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "my_pairs.yaml").write_text(
        USER_SPEC.replace("  train: my_pairs/train.jsonl\n",
                          "  train: my_pairs/train.jsonl\n  dev: my_pairs/dev.jsonl\n")
        .replace("metric: retrieval", f"metric: {metric}"), encoding="utf-8")
    tokenizer_for(passages + [r["query"] for r in records], tmp_path)  # every hanzi its own token
    experiment = tmp_path / "experiment.yaml"
    experiment.write_text(json.dumps({
        "data_root": str(tmp_path / "data"), "cache_dir": str(tmp_path / "cache"),
        "task_specs": [str(tmp_path / "specs")], "backbone": ONE_LAYER, "tasks": ["my_retrieval"],
        "vocab": str(tmp_path / "vocab.txt"), "batch_size": 4, "max_length": 24, "steps": 4,
        "checkpoint_every": 4, "eval_every": 4, "seed": 0, "precision": "float32",
        "optimizer": {"name": "adamw", "lr": 0.003}}), encoding="utf-8")
    assert mtl(["train", str(experiment), "--output", str(tmp_path / "run")]) == 0
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(logged) == 4 and all(math.isfinite(log["tasks"]["my_retrieval"]["loss"]) for log in logged)
    evaluation = json.loads((tmp_path / "run" / "evaluations.jsonl").read_text().splitlines()[-1])
    return records, evaluation["tasks"]["my_retrieval"]


def test_a_users_pairs_task_trains_and_scores_retrieval_through_yaml_alone(tmp_path):
    """It trains (hard negatives drawn), evaluates dev by retrieval over the split's
    distinct passages."""
    _, scored = train_users_pairs_task(tmp_path, "retrieval")
    assert scored["metric"] == "retrieval" and 0 < scored["score"] <= 1
    assert scored["result"]["documents"] == 12.0  # passage 0 once, though two queries have it
    assert scored["score"] == scored["result"]["ndcg_at_10"]


def test_a_users_pairs_task_scored_by_reranking_ranks_each_positive_among_its_negatives(tmp_path):
    """metric: reranking: dev batches hold every stored negative (training draws
    hard_negatives: 2 of the 3); MAP with one positive a query is the mean of 1 / its rank
    (a negative tied with it ranked above it, as mteb breaks ties), MRR@10 the same here (4
    candidates at most), recomputed from the run's encoder."""
    from mtl_framework.embedding.encode import Encoder

    records, scored = train_users_pairs_task(tmp_path, "reranking")
    assert scored["metric"] == "reranking" and scored["score"] == scored["result"]["map"]
    assert scored["result"]["candidates"] == pytest.approx((12 * 4 + 1) / 13)
    encoder = Encoder(tmp_path / "run", log=None)
    reciprocal = []
    for record in records:
        query = encoder.encode([record["query"]], side="query")[0]
        candidates = encoder.encode([record["pos"]] + record.get("neg", []), side="passage")
        cosines = candidates @ query / np.linalg.norm(candidates, axis=1) / np.linalg.norm(query)
        reciprocal.append(1.0 / (1 + int(np.sum(cosines[1:] >= cosines[0]))))
    print(f"MAP {scored['score']:.4f}, by hand {np.mean(reciprocal):.4f}")
    assert scored["score"] == pytest.approx(np.mean(reciprocal), abs=1e-6)
    assert scored["result"]["mrr_at_10"] == pytest.approx(np.mean(reciprocal), abs=1e-6)

    # the local suite's reranking kind scores the same dev split the same way
    from mtl_framework.embedding.suite import embedding_benchmark

    suite = tmp_path / "suite.yaml"
    suite.write_text("kind: embeddings\ntasks:\n  - my_retrieval\nbootstrap: 50\n", encoding="utf-8")
    results = embedding_benchmark([str(tmp_path / "run")], suite, tmp_path / "data", tmp_path / "suite_out",
                                  task_specs=[tmp_path / "specs"], log=lambda *a: None)
    (row,) = results["rows"]
    assert row["kind"] == "reranking" and row["examples"] == 13 and row["trained_on_dataset"]
    assert row["score"] == pytest.approx(np.mean(reciprocal), abs=1e-6)


@pytest.mark.slow
def test_jax_data_parallel_on_two_devices_equals_one_process_with_contrastive_tasks(tmp_path):
    """On JAX (.venv-jax) `mirrored` shards a micro-batch's rows over the devices and XLA
    computes the global batch's loss: the same update as one device."""
    import os
    import subprocess

    from run_harness import JAX_PYTHON, TWO_WORKERS, load_state, write_experiment

    if not JAX_PYTHON.exists():
        pytest.skip(".venv-jax is absent (make interop-jax)")
    steps, tasks = 2, MIXED[1:]
    experiment = write_experiment(
        tmp_path / "experiment.yaml", **{**TWO_WORKERS, "tasks": tasks, "tasks_per_update": 2,
                                         "batch_size": 8, "max_length": 16, "steps": steps,
                                         "eval_every": 0, "optimizer": PLAIN_SGD})
    for name, devices in (("single", 1), ("mirrored", 2)):
        env = {**os.environ, "KERAS_BACKEND": "jax", "CUDA_VISIBLE_DEVICES": "",
               "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
        shown = subprocess.run([str(JAX_PYTHON), "-c", "import jax; print(jax.device_count())"],
                               env=env, capture_output=True, text=True, timeout=120).stdout.split()
        assert shown[-1:] == [str(devices)]
        child = subprocess.run([str(JAX_PYTHON), "tests/distributed_worker.py", str(experiment),
                                str(tmp_path / name), "none" if devices == 1 else "mirrored", str(steps),
                                str(tmp_path / f"{name}.npz")], cwd=Path(__file__).resolve().parents[1],
                               env=env, capture_output=True, text=True, timeout=600)
        assert child.returncode == 0, (child.stdout + child.stderr)[-3000:]
    mirrored, single = load_state(tmp_path / "mirrored.npz"), load_state(tmp_path / "single.npz")
    difference = max(float(np.abs(a.astype("float64") - b).max()) for a, b in zip(mirrored, single))
    print(f"JAX: max |DataParallel on 2 CPU devices - one device| after {steps} updates: {difference:.3g}")
    assert len(mirrored) == len(single) and difference <= 1e-5  # measured: 1.9e-6


# --- the cached-gradient (GradCache) step: embedding.cached_chunk ------------------------

# chunk/dropout/loss: a chunk size dividing the 15 texts, one that does not, one text a chunk,
# CoSENT; with dropout (one chunk of all, several) the reference is the same chunked forward
# (its masks) differentiated under one tape.
GRADIENT_CACHE_CASES = ["5/0.0/infonce", "4/0.0/infonce", "1/0.0/infonce", "15/0.1/infonce",
                        "4/0.1/infonce", "4/0.0/cosent"]


def assert_cached_equals_plain(found):
    for case, (difference, scale, loss_difference) in found.items():
        print(f"{case}: max |cached - reference update| {difference:.3g} (largest {scale:.3g}), "
              f"loss {loss_difference:+.3g}")
        assert scale > 0.1, case  # the update moved the backbone
        assert difference <= 1e-5 * max(1.0, scale), case
        assert abs(loss_difference) <= 1e-5, case


def test_cached_gradient_step_equals_the_plain_step():
    """One update by GradCache in chunks equals the plain update (TensorFlow): the
    vectors' gradient pushed back chunk by chunk is the whole micro-batch's gradient, and
    each chunk draws the same dropout masks in both of its passes."""
    import gradient_cache_worker

    assert_cached_equals_plain(gradient_cache_worker.differences(GRADIENT_CACHE_CASES))


def test_cached_gradient_step_equals_the_plain_step_on_jax():
    import os
    import subprocess

    from run_harness import JAX_PYTHON

    if not JAX_PYTHON.exists():
        pytest.skip(".venv-jax is absent (make interop-jax)")
    repo = Path(__file__).resolve().parents[1]
    child = subprocess.run([str(JAX_PYTHON), str(repo / "tests" / "gradient_cache_worker.py"),
                            *GRADIENT_CACHE_CASES], cwd=repo, capture_output=True, text=True, timeout=600,
                           env={**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(repo),
                                "CUDA_VISIBLE_DEVICES": ""})
    assert child.returncode == 0, child.stderr[-3000:]
    assert_cached_equals_plain({k: tuple(v) for k, v in json.loads(child.stdout.splitlines()[-1]).items()})


def test_cached_chunk_is_a_traced_setting_and_checked():
    plain, cached = contrastive_head(), contrastive_head(cached_chunk=32)
    assert cached.get_config()["cached_chunk"] == 32
    assert plain.trace_key() != cached.trace_key()  # another micro-step
    from mtl_framework.families.contrastive import settings_problems

    assert settings_problems({"cached_chunk": 32}) == []
    assert settings_problems({"cached_chunk": -1}) == [
        ("cached_chunk", "embedding.cached_chunk must be a whole number >= 0, got -1")]


def test_queries_and_passages_run_apart_each_cut_to_its_longest_text():
    """The step runs a contrastive batch's queries and passages through the backbone apart,
    each padded only to its own longest text (TensorFlow): the vectors are those of every
    text padded to the batch's length, folded into one call."""
    import gradient_cache_worker
    import keras

    from mtl_framework import RoFormerV2Backbone
    from mtl_framework.sentence_encoder.model import pool
    from mtl_framework.step.model import MultiTaskModel

    keras.utils.set_random_seed(0)
    backbone = RoFormerV2Backbone(vocab_size=64, num_layers=2, hidden_size=16, num_heads=2,
                                  intermediate_size=32, dropout=0.0)
    backbone.build()
    for pooling in ("cls", "mean"):
        head = build_head("contrastive", None, 16, name="pairs", pooling=pooling)
        model = MultiTaskModel(backbone, {"pairs": head}, tasks_per_update=1)
        batch = gradient_cache_worker.contrastive_batch()
        batch["token_ids"][:, 0, 5:] = 0  # queries of at most 5 tokens, passages up to 9
        batch["token_ids"][2, 2] = 0
        apart = ops.convert_to_numpy(model.task_outputs("pairs", batch))
        folded = batch["token_ids"].reshape(-1, batch["token_ids"].shape[-1])
        hidden = backbone({"token_ids": folded, "segment_ids": np.zeros_like(folded)})
        together = ops.convert_to_numpy(pool(hidden, folded, pooling)).reshape(apart.shape)
        real = batch["text_mask"] > 0
        assert np.abs(apart[real] - together[real]).max() <= 1e-5, pooling


def test_reranking_metric_refuses_a_split_without_negatives():
    from mtl_framework.scoring.metrics import METRICS

    unit = np.eye(3)
    predictions = [{"query": unit[0], "positive": unit[1], "negatives": np.zeros((0, 3))}]
    with pytest.raises(ValueError, match="no pair has hard negatives"):
        METRICS["reranking"](predictions, [{"score": math.nan, "positive_id": 1}])
    predictions[0]["positive"] = (unit[0] + unit[1]) / np.sqrt(2)  # cosine 0.71 with the query
    predictions[0]["negatives"] = unit[[0, 2]]  # cosines 1 (above the positive) and 0
    result = METRICS["reranking"](predictions, [{"score": math.nan, "positive_id": 1}])
    assert (result["map"], result["mrr_at_10"], result["candidates"]) == (0.5, 0.5, 3.0)
