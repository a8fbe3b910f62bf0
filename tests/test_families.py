"""The family table (mtl_framework/families/): one record per family, from which the
schema, featurizers, batch functions and heads are derived; batches match the family's
declared batch spec; every family passes the family harness."""
import ast
import functools
import itertools
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from family_harness import FamilyCase, one_hot_logits, run_family_test, tied_embedding

import data_adapters
import mtl_framework
from data_adapters import examples as ex  # the rarer example types
from data_adapters import read_task
from data_adapters.examples import (
    Entity,
    NERExample,
    Span,
    TextExample,
)
from mtl_framework.config import spec_schema
from mtl_framework.config.registry import load_registry
from mtl_framework.families import FAMILIES, MLM, family, featurizer_for_task, make_featurizer
from mtl_framework.families import heads as H
from mtl_framework.families.mlm_heads import MLMHead
from mtl_framework.families.text_heads import ClassificationHead
from mtl_framework.tokenizer import Tokenizer, build_vocab, count_units, example_texts, write_vocab

# --- the table ---------------------------------------------------------------------------


def test_importing_the_table_and_the_schema_loads_no_tensorflow():
    """Spec checks and feature workers run before TensorFlow loads (and must stay light)."""
    code = ("import sys, mtl_framework.families, mtl_framework.config.spec_schema, "
            "mtl_framework.families.features, mtl_framework.config.registry, mtl_framework.plan, "
            "mtl_framework.prepare.pipeline; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'tensorflow', 'keras'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_schema_and_the_adapters_agree_with_the_table():
    # every family a spec may declare, labels required exactly where its featurizer needs them
    assert spec_schema.TASK_TYPES == {name: record.featurizer.needs_labels
                                      for name, record in FAMILIES.items() if name != MLM}
    assert spec_schema.MULTI_LABEL_TYPES == tuple(
        name for name, record in FAMILIES.items() if record.multi_label_spec)
    # the formats read the task types' facts from data_adapters.task_types: the same families
    assert data_adapters.LABELLED_TYPES == tuple(n for n, f in FAMILIES.items() if f.labelled)


def test_every_family_has_a_registered_head_class_and_its_own_featurizer():
    assert set(H.head_classes()) == set(FAMILIES)
    for name, record in FAMILIES.items():
        assert issubclass(H.head_classes()[name], H.TaskHead), name
        assert name in H.head_classes()[name].families
        assert record.featurizer.family == name
        # the head sits beside its family: families/<module>.py and families/<module>_heads.py
        assert H.head_classes()[name].__module__ == record.featurizer.__module__ + "_heads", name


def test_families_sharing_a_head_class_train_alike():
    """`family` is left out of a head's trace key: what the step reads of the family
    (choice axis, loss denominator) must then be equal within a head class."""
    for head_class in set(H.head_classes().values()):
        records = [FAMILIES[name] for name in head_class.families]
        assert len({(r.choice_axis, r.loss_denominator) for r in records}) == 1, head_class


def test_a_head_from_its_constructor_or_config_knows_its_family():
    made = ClassificationHead(3, family="matching")
    assert made.family == "matching" and made.get_config()["family"] == "matching"
    assert ClassificationHead.from_config(made.get_config()).family == "matching"
    assert ClassificationHead(3).family == "classification"  # its first family
    assert MLMHead(embeddings=np.zeros((5, 4), "float32")).family == "mlm"
    with pytest.raises(ValueError, match="ClassificationHead is the head of classification, "
                                         "matching, not 'regression'"):
        ClassificationHead(3, family="regression")


def test_raw_texts_become_examples_as_the_family_says():
    """`mtl predict --text` / predict_texts read the family's `from_texts` and `two_texts`."""
    from types import SimpleNamespace

    from mtl_framework.errors import UserError
    from mtl_framework.evaluation.predict import PredictModel

    raw = [name for name, record in FAMILIES.items() if record.from_texts]
    for name, record in FAMILIES.items():
        task = SimpleNamespace(name="t", type=name)
        if record.from_texts is None:
            with pytest.raises(UserError, match=f"task 't' .{name}.: raw texts are for "
                                                f"{', '.join(raw[:-1])} and {raw[-1]} tasks"):
                PredictModel.text_examples(None, task, ["一"])
            continue
        if record.two_texts:
            with pytest.raises(UserError, match=r"compares two texts, got one: '一'"):
                PredictModel.text_examples(None, task, ["一", ("二", "三")])
        [example] = PredictModel.text_examples(None, task, [("二", "三") if record.two_texts else "一"])
        assert isinstance(example, record.featurizer.example_types)
        assert example.text == ("二" if record.two_texts else "一")
    with pytest.raises(UserError, match=r"\(extraction_ner\): one string per text, not \('a', 'b'\)"):
        PredictModel.text_examples(None, SimpleNamespace(name="t", type="extraction_ner"), [("a", "b")])


PACKAGE = Path(mtl_framework.__file__).parent


def modules_spelling(name, root=PACKAGE):
    """The modules under `root` that spell `name`: in quotes anywhere in their source
    ("name" or 'name', docstrings included), or as a string constant of their code."""
    quoted = re.compile(r"""["']""" + re.escape(name) + r"""["']""")
    return {module for module, (text, constants) in module_strings(root).items()
            if name in constants or quoted.search(text)}


@functools.cache
def module_strings(root):
    """{module path under root: (its source, the string constants of its code)}, read once."""
    out = {}
    for path in root.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        constants = {node.value for node in ast.walk(ast.parse(text))
                     if isinstance(node, ast.Constant) and isinstance(node.value, str)}
        out[path.relative_to(root).as_posix()] = (text, constants)
    return out


def test_the_spelling_scan_finds_quotes_and_constants_not_prose(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.py").write_text('TYPE = "matching"\n')
    (tmp_path / "sub" / "b.py").write_text('"""family(\'matching\') in a docstring"""\n')
    (tmp_path / "c.py").write_text('# matching in a comment\nx = "a matching task"\n')
    (tmp_path / "d.py").write_text('y = "matchings"\n')
    assert modules_spelling("matching", tmp_path) == {"a.py", "sub/b.py"}


def test_a_family_name_is_spelled_in_one_module():
    """A family's name and what its examples are live in data_adapters/task_types.py; the
    Family records, featurizers, heads and formats take them from there (mlm: also
    experiment.MLM_TASK, the reserved task name; base.py's docstring shows a user's format)."""
    allowed = {"data_adapters/task_types.py", "mtl_framework/config/experiment.py",
               "data_adapters/base.py"}
    for name in FAMILIES:
        found = {f"{root.name}/{module}" for root in (PACKAGE, PACKAGE.parent / "data_adapters")
                 for module in modules_spelling(name, root)}
        assert "data_adapters/task_types.py" in found, name
        assert found <= allowed, f"{name!r} spelled in {sorted(found - allowed)}; take it from " \
                                 "data_adapters.task_types (or make the fact a Family field)"


def test_an_unknown_type_is_named_with_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown task type 'ner'; expected one of: "
                                         r"classification, matching, .*, mlm$"):
        family("ner")


# --- batches against the declared spec -------------------------------------------------------

TEXT = "毛主席在北京看书他在上海写字今天天气很好明天会下雨吗"


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    write_vocab(build_vocab(count_units([TEXT, "甲乙丙丁戊己庚辛"])), path)
    return Tokenizer(str(path))


EVENT_LABELS = ["读:trigger", "读:人", "读:地", "写:trigger", "写:地"]
# family -> (labels, featurizer settings, examples): two or three rows each
SYNTHETIC = {
    "classification": (["好", "坏", "平"], {}, [TextExample("今天天气很好", label="好"),
                                               TextExample("明天会下雨吗", label="坏")]),
    "matching": (["0", "1"], {}, [TextExample("今天天气", "天气很好", "1"),
                                  TextExample("看书", "写字", "0")]),
    "regression": (None, {}, [TextExample("今天天气", "天气很好", 4.5),
                              TextExample("看书", "写字", 0.5)]),
    "mrc_span": (None, {"stride": 4}, [
        ex.SpanQAExample("谁在北京", TEXT, [Span(0, 3, "毛主席")]),
        ex.SpanQAExample("天气", TEXT, [Span(16, 18, "很好")])]),
    "multiple_choice": (None, {}, [ex.ChoiceExample("今天天气很好", "天气", ["好", "坏", "平"], 0),
                                   ex.ChoiceExample("明天会下雨吗", "", ["会", "不会"], 1)]),
    "cloze": (None, {}, [ex.ChoiceExample("今天天气很好", "", ["好", "坏"], 1)]),
    "extraction_ner": (["人", "地"], {}, [
        NERExample(TEXT, [Entity(0, 3, "人"), Entity(4, 6, "地"), Entity(10, 12, "地")]),
        NERExample("今天天气很好", [])]),
    "extraction_relation": (["在", "看"], {}, [
        ex.RelationExample(TEXT, [ex.Triple(Entity(0, 3, "人"), "在", Entity(4, 6, "地")),
                               ex.Triple(Entity(8, 9, "人"), "在", Entity(10, 12, "地"))])]),
    "extraction_event": (EVENT_LABELS, {}, [ex.EventExample(TEXT, [
        ex.Event("读", Entity(6, 8, "trigger"), [Entity(0, 3, "人"), Entity(4, 6, "地")]),
        ex.Event("写", Entity(12, 14, "trigger"), [Entity(10, 12, "地")])])]),
    "coreference": (["false", "true"], {}, [
        ex.CorefExample(TEXT, Entity(0, 3, "毛主席"), Entity(7, 8, "他"), "true"),
        ex.CorefExample(TEXT, Entity(4, 6, "北京"), Entity(7, 8, "他"), "false")]),
    "contrastive": (None, {"hard_negatives": 2, "loss": "cosent"}, [
        ex.PairExample("今天天气", "天气很好", ("明天会下雨吗", "看书", "写字"), 0.5),
        ex.PairExample("谁在北京", "毛主席在北京", (), -0.25)]),
    MLM: (None, {}, [TEXT, "今天天气很好"]),
}


def synthetic_features(tokenizer, name, multi_label=False):
    labels, settings, examples = SYNTHETIC[name]
    featurizer = make_featurizer(name, tokenizer, 24, labels, multi_label, "toy", **settings)
    return featurizer.featurize(examples)


def synthetic_batch(tokenizer, name, multi_label=False):
    features = synthetic_features(tokenizer, name, multi_label)
    return features, features.batch(np.arange(len(features)), np.random.default_rng(0))


def test_every_family_has_a_synthetic_case():
    assert set(SYNTHETIC) == set(FAMILIES)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_synthetic_batches_match_the_declared_spec(tokenizer, name):
    _, batch = synthetic_batch(tokenizer, name)
    family(name).check_batch(batch)
    wrong = {**batch, "token_ids": batch["token_ids"].astype(np.int64)}
    with pytest.raises(ValueError, match="token_ids"):
        family(name).check_batch(wrong)
    with pytest.raises(ValueError, match="keys"):
        family(name).check_batch({**batch, "extra": batch["token_ids"]})


def test_multi_label_batches_match_their_spec(tokenizer):
    _, batch = synthetic_batch(tokenizer, "classification", multi_label=True)
    family("classification").check_batch(batch, multi_label=True)
    with pytest.raises(ValueError, match="label"):
        family("classification").check_batch(batch)


# One task per family with data in ../shared/data (extraction_event has none: synthetic above).
REAL = {"classification": "tnews", "matching": "afqmc", "regression": "stsb_zh",
        "mrc_span": "cmrc2018", "multiple_choice": "c3_m", "cloze": "chid",
        "extraction_ner": "cluener", "extraction_relation": "duie_spo", "coreference": "cluewsc",
        MLM: "tnews"}


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_batches_match_the_declared_spec(shared_data, tmp_path, name):
    task = load_registry().tasks[REAL[name]]
    examples = list(itertools.islice(read_task(task, "train", shared_data), 40))
    texts = [t for e in examples for t in example_texts(e)]
    write_vocab(build_vocab(count_units(texts), max_size=3000), tmp_path / "vocab.txt")
    tokenizer = Tokenizer(str(tmp_path / "vocab.txt"))
    featurizer = featurizer_for_task(task, tokenizer, shared_data, 64,
                                     MLM if name == MLM else None)
    features = featurizer.featurize(examples)
    rng = np.random.default_rng(0)
    for rows in (np.arange(min(8, len(features))), np.arange(len(features))[-3:]):
        family(name).check_batch(features.batch(rows, rng), task.multi_label)


# --- the family harness ------------------------------------------------------------------------


def span_scores(batch):
    """[B, L, L] mrc logits: the gold (start, end) highest, (0, 0) when no answer here."""
    length = batch["token_ids"].shape[1]
    scores = np.full((len(batch["start"]), length, length), -10.0, "float32")
    scores[np.arange(len(scores)), batch["start"], batch["end"]] = 10.0
    return scores


def pointer_scores(*keys):
    def gold(batch):
        length = batch["token_ids"].shape[-1]
        out = {k: H._label_scores(batch[f"{k}_labels"], length) for k in keys}
        return out if len(keys) > 1 else out[keys[0]]
    return gold


def mlm_scores(vocab_size):
    def gold(batch):
        labels = batch["mlm_labels"]
        return np.where(np.arange(vocab_size) == labels[..., None], 10.0, -10.0).astype("float32")
    return gold


def harness_case(tokenizer, name):
    features, batch = synthetic_batch(tokenizer, name)
    labels = SYNTHETIC[name][0]
    n = len(labels) if labels else None
    rows = range(len(features))
    if name in ("classification", "matching", "coreference"):
        return FamilyCase(name, batch, n, n + 1, lambda b: one_hot_logits(b["label"], n),
                          expected=[int(x) for x in features["label"]])
    if name == "regression":
        return FamilyCase(name, batch, None, None, lambda b: b["label"],
                          expected=[4.5, 0.5])
    if name == "mrc_span":
        return FamilyCase(name, batch, None, None, span_scores, head_kwargs=lambda n: {"head_size": 8},
                          project=lambda d: (d["start"], d["end"]) if d["score"] > d["null_score"]
                          else (0, 0),
                          expected=list(zip(features["start"].tolist(), features["end"].tolist())))
    if name in ("multiple_choice", "cloze"):
        choices = batch["token_ids"].shape[1]
        return FamilyCase(name, batch, None, None, lambda b: one_hot_logits(b["label"], choices),
                          expected=[int(x) for x in features["label"]])
    if name == "extraction_ner":
        return FamilyCase(name, batch, n, n + 2, pointer_scores("entity"),
                          head_kwargs=lambda n: {"head_size": 8},
                          expected=[{tuple(e) for e in features.ragged("entities", r).tolist()}
                                    for r in rows])
    if name == "extraction_relation":
        return FamilyCase(name, batch, n, n + 2, pointer_scores("entity", "head", "tail"),
                          head_kwargs=lambda n: {"head_size": 8},
                          expected=[{(sh, st, p, oh, ot) for p, sh, st, oh, ot
                                     in features.ragged("triples", r).tolist()} for r in rows])
    if name == "extraction_event":
        def events(row):
            by_event = {}
            for number, role, start, end in features.ragged("arguments", row).tolist():
                by_event.setdefault(number, []).append((role, start, end))
            return sorted(tuple(sorted(e)) for e in by_event.values())
        groups = [label.split(":")[0] for label in labels]
        return FamilyCase(name, batch, n, n + 1, pointer_scores("argument", "head", "tail"),
                          head_kwargs=lambda k: {"head_size": 8,
                                                 "role_groups": (groups + ["新"])[:k]},
                          normalize=sorted, expected=[events(r) for r in rows])
    if name == "contrastive":
        def gold_vectors(batch):  # per row: query and positive at the cosine of its score
            vectors = np.zeros(batch["token_ids"].shape[:2] + (4,), "float32")
            vectors[:, :, 0] = 1.0
            for b, score in enumerate(batch["score"]):
                vectors[b, 1] = [score, np.sqrt(1 - score ** 2), 0, 0]
            return vectors
        return FamilyCase(name, batch, None, None, gold_vectors,
                          project=lambda d: d["cosine"],
                          normalize=lambda r: round(float(r["score"] if isinstance(r, dict) else r), 5),
                          expected=[0.5, -0.25])
    if name == MLM:
        vocab = tokenizer.vocab_size
        return FamilyCase(name, batch, vocab, vocab, mlm_scores(vocab),
                          tied={"embeddings": tied_embedding(vocab)},
                          expected=[row[row > 0] for row in batch["mlm_labels"]])
    raise AssertionError(f"no harness case for family {name!r}")


@pytest.mark.parametrize("name", list(FAMILIES))
def test_family_harness(tokenizer, name):
    run_family_test(harness_case(tokenizer, name))


def test_family_harness_multi_label(tokenizer):
    features, batch = synthetic_batch(tokenizer, "classification", multi_label=True)
    case = FamilyCase("classification", batch, 3, 4,
                      lambda b: np.where(b["label"] > 0.5, 10.0, -10.0).astype("float32"),
                      head_kwargs=lambda n: {"multi_label": True}, multi_label=True,
                      expected=[[0], [1]])
    run_family_test(case)


def test_every_example_type_has_its_gold_row():
    """`mtl predict` empties each example type's gold (data_adapters.examples.GOLD)."""
    from data_adapters import examples

    types = [v for k, v in vars(examples).items() if k.endswith("Example") and isinstance(v, type)]
    assert set(examples.GOLD) == set(types)
    stripped = examples.without_gold(examples.TextExample("t", label="pos"))
    assert (stripped.text, stripped.label) == ("t", None)
    ner = examples.without_gold(examples.NERExample("ab", [examples.Entity(0, 1, "x")], id=7))
    assert (ner.text, ner.entities, ner.id) == ("ab", [], 7)
