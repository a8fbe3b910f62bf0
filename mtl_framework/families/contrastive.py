"""Sentence embeddings: a query and its positive (and hard negatives) -> one vector each.

A task of type `contrastive` trains the backbone's pooled output as a sentence embedding,
beside every other family in the mixture. Its examples come from three kinds of data:

- pairs files (format `pairs`, FlagEmbedding's {"query", "pos", "neg"}): PairExample;
- text-pair formats (STS, matching): text -> query, text_b -> positive, label -> score;
- reading-comprehension formats (squad, multi_passage_qa): an answered question -> the
  passage holding its answer (an unanswered one is no pair: dropped and counted).

Each text is featurized alone, `[CLS] prefix + text [SEP]`: the query with the task's
`query_prefix`, the positive and negatives with its `passage_prefix`. A batch is
[B, K, L] with K = 2 + negatives (query, positive, negatives...), folded into the batch
axis for the backbone as multiple choice folds its choices; ContrastiveHead pools
and scores (families/contrastive_heads.py). The task's `embedding:` settings are below,
EMBEDDING_SETTINGS; docs/embeddings.md explains them.
"""
import difflib
import hashlib
import math

import numpy as np

from data_adapters.examples import PairExample, SpanQAExample, TextExample
from data_adapters.task_types import CONTRASTIVE, MRC_SPAN
from mtl_framework.families.base import Family
from mtl_framework.families.features import CHOICES, Featurizer, batch_length, pad_rows
from mtl_framework.numbers import yaml_number
from mtl_framework.sentence_encoder.settings import POOLINGS, TRAINED

LOSSES = ("infonce", "cosent")


def _choice(options):
    def check(value):
        if value not in options:
            return f"must be one of {', '.join(options)}, got {value!r}"
    return check


# Numbers follow the one YAML number rule (yaml_io.yaml_number): `1e-2` is a number, as in an
# experiment; `.inf` and `.nan` are not (a temperature of inf makes every logit 0: the loss
# stays ln K and nothing is learned).
def _positive_number(value):
    number = yaml_number(value)
    if number is None or not number > 0:
        return f"must be a finite number > 0, got {value!r}"


def _number(value):
    if yaml_number(value) is None:
        return f"must be a finite number, got {value!r}"


NUMBER_CHECKS = (_positive_number, _number)


def _whole(value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return f"must be a whole number >= 0, got {value!r}"


def _flag(value):
    if not isinstance(value, bool):
        return f"must be true or false, got {value!r}"


def _text(value):
    if not isinstance(value, str):
        return f"must be a string (\"\" for none), got {value!r}"


def _dims(value):
    if not isinstance(value, list) or any(isinstance(d, bool) or not isinstance(d, int) or d <= 0
                                          for d in value):
        return f"must be a list of whole numbers > 0, e.g. [768, 256, 64], got {value!r}"
    if len(set(value)) != len(value):
        return f"lists a dimension twice: {value!r}"


# key -> (checker, default, where it acts: "head" (the loss, the pooled output),
# "features" (what the cache holds) or both (the loss: InfoNCE keeps positive pairs only)).
# Defaults follow sentence-transformers' MultipleNegativesRankingLoss (cosine / 0.05, its
# scale 20); the embedding's own (pooling, normalize, prefixes, Matryoshka dims) are
# sentence_encoder/settings.py's TRAINED.
EMBEDDING_SETTINGS = {
    "loss": (_choice(LOSSES), "infonce", "head features"),
    "temperature": (_positive_number, 0.05, "head"),
    "in_batch_negatives": (_flag, True, "head"),
    "pooling": (_choice(POOLINGS), TRAINED["pooling"], "head"),
    "normalize": (_flag, TRAINED["normalize"], "head"),
    "matryoshka_dims": (_dims, TRAINED["matryoshka_dims"], "head"),
    # GradCache (sentence-transformers' CachedMultipleNegativesRankingLoss, its
    # mini_batch_size): texts per chunk through the backbone; 0 = every text at once
    "cached_chunk": (_whole, 0, "head"),
    "hard_negatives": (_whole, 1, "features"),
    "positive_score": (_number, 1.0, "features"),
    # the head records the prefixes (it does not use them): encoding a run or an export
    # reads them from there, as it reads the pooling
    "query_prefix": (_text, TRAINED["query_prefix"], "features head"),
    "passage_prefix": (_text, TRAINED["passage_prefix"], "features head"),
}


def settings_problems(value):
    """[(key or None, message)] of what is wrong with a task's `embedding:` mapping, each
    message whole after the task's label ("embedding.loss must be ...")."""
    if not isinstance(value, dict):
        return [(None, f"embedding must be a mapping (key: value lines), got {type(value).__name__}")]
    problems = []
    for key, setting in value.items():
        if key not in EMBEDDING_SETTINGS:
            close = difflib.get_close_matches(str(key), EMBEDDING_SETTINGS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append((key, f"embedding: unknown setting {key!r}{hint}; allowed: "
                                  f"{', '.join(EMBEDDING_SETTINGS)}"))
            continue
        problem = EMBEDDING_SETTINGS[key][0](setting)
        if problem:
            problems.append((key, f"embedding.{key} {problem}"))
    if not problems and _without_candidates(embedding_settings(value)):
        problems.append(("in_batch_negatives", "embedding.in_batch_negatives: false with "
                         "hard_negatives: 0 leaves a query no candidate besides its positive "
                         "(the loss is 0, nothing is learned): keep in_batch_negatives, or give "
                         "hard_negatives >= 1"))
    return problems


def _without_candidates(settings):
    """InfoNCE picks the positive among candidates: with neither the batch's other positives
    nor a hard negative there is only the positive to pick."""
    return (settings["loss"] == "infonce" and not settings["in_batch_negatives"]
            and settings["hard_negatives"] == 0)


def batch_problem(task, batch_size):
    """A line when an InfoNCE task that draws no hard negative trains in batches of one: a
    query's only candidates are its batch-mates' positives, and a batch of one has none
    (R5-15's case, by the experiment's batch_size); None otherwise."""
    settings = embedding_settings(task)
    if (batch_size < 2 and settings["loss"] == "infonce" and settings["in_batch_negatives"]
            and settings["hard_negatives"] == 0):
        return (f"batch_size: {batch_size} leaves task {task.name!r} (in-batch negatives, "
                "hard_negatives: 0) no candidate besides a query's positive: its batch-mates' "
                "positives are its negatives (the loss is 0, nothing is learned): give "
                "batch_size >= 2, or embedding.hard_negatives >= 1 with a `pairs` file's negatives")
    return None


def train_problem(task, features, batch_size):
    """A line when no train batch can give an InfoNCE query a candidate besides its positive
    (the loss is 0 every update, nothing is learned): every row with the same positive text
    (a batch-mate with it is masked, not a negative: docs/embeddings.md), or no batch-mate,
    and no hard negative drawn. Said before the run, not after NotLearning's 100
    micro-batches at loss 0; None otherwise."""
    settings = embedding_settings(task)
    if settings["loss"] != "infonce":
        return None
    positives = len(np.unique(np.asarray(features["positive_id"])))
    with_negatives = int(np.count_nonzero(np.diff(np.asarray(features[CHOICES])) > 2))
    if settings["hard_negatives"] >= 1 and with_negatives:
        return None
    if not settings["in_batch_negatives"]:
        mates = "in_batch_negatives: false"
    elif batch_size < 2:
        mates = f"batch_size {batch_size}: no batch-mate"
    elif positives < 2:
        mates = "every row has the same positive text (a batch-mate with it is no negative)"
    else:
        return None
    drawn = (f"hard_negatives: 0 draws none of the {with_negatives} rows' negatives"
             if with_negatives else "no row has a hard negative")
    return (f"{task.spec_path}:{task.line}: task {task.name!r}: its {len(features)} train rows "
            f"leave a query no candidate besides its positive ({mates}; {drawn}): the loss "
            "is 0, nothing is learned: give rows with different positives, or hard negatives "
            "(`neg`) with embedding.hard_negatives >= 1")


# The fields a format may read a pair's score from (pairs: `score`; text-pair formats: the label).
SCORE_FIELDS = ("score", "label")


def data_problems(value, adapter, fields):
    """[(key, message)]: valid `embedding:` settings (`value`) that the task's format cannot
    feed: CoSENT without a score to learn from, InfoNCE without in-batch negatives on a
    format without hard negatives (both would train at loss 0). `adapter`: the format's class;
    `fields`: the spec's field mapping."""
    settings = embedding_settings(value)
    declared = tuple(getattr(adapter, "field_keys", ()) or ())
    mapped = {**(getattr(adapter, "field_defaults", None) or {}), **fields}
    reading_comprehension = MRC_SPAN.name in (getattr(adapter, "task_types", ()) or ())
    problems = []
    if settings["loss"] == "cosent":
        source = next((key for key in SCORE_FIELDS if key in declared), None)
        if source is not None and mapped.get(source) is None:
            problems.append(("loss", "embedding.loss cosent learns from each pair's score, and "
                             f"`fields:` maps no `{source}`: map it to the score's source key, "
                             "or use loss: infonce"))
        elif source is None and reading_comprehension:
            problems.append(("loss", "embedding.loss cosent learns from each pair's score, and a "
                             "question and its passage have none: use loss: infonce"))
    if "text_b" in declared and mapped.get("text_b") is None:  # every row would be dropped
        problems.append(("fields", "a contrastive task learns from pairs, and `fields:` maps no "
                         "text_b (the positive, beside text: the query): map text_b to the "
                         "second text's column or key, or use format: pairs"))
    if (settings["loss"] == "infonce" and not settings["in_batch_negatives"]
            and "negatives" not in declared and (declared or reading_comprehension)):
        problems.append(("in_batch_negatives", "embedding.in_batch_negatives: false, and this "
                         "format gives no hard negatives: a query has no candidate besides its "
                         "positive (the loss is 0): keep in_batch_negatives, or train on a "
                         "`pairs` file with negatives"))
    return problems


def written_settings(value):
    """A valid `embedding:` mapping as the spec wrote it, its numbers read as numbers (`1e-2`
    is a string to YAML 1.1); None stays None."""
    if not isinstance(value, dict):
        return value
    return {key: yaml_number(setting) if key in EMBEDDING_SETTINGS
            and EMBEDDING_SETTINGS[key][0] in NUMBER_CHECKS else setting
            for key, setting in value.items()}


def embedding_settings(task):
    """A task's `embedding:` settings, defaults filled in (a dict, or a TaskSpec)."""
    given = getattr(task, "embedding", task) or {}
    return {key: given.get(key, default) for key, (_, default, _) in EMBEDDING_SETTINGS.items()}


def _acting(task, where):
    settings = embedding_settings(task)
    return {key: settings[key] for key, (_, _, acts) in EMBEDDING_SETTINGS.items()
            if where in acts.split()}


def head_settings(task, labels):
    settings = _acting(task, "head")
    settings["matryoshka_dims"] = tuple(settings["matryoshka_dims"])
    return settings


def feature_settings(task):
    settings = _acting(task, "features")
    if getattr(task, "metric", None) == "reranking":  # a dev / test batch holds them all
        settings["scored_negatives"] = "all"
    return settings


PREFIXES = ("query_prefix", "passage_prefix")


def least_tokens(text):
    """The fewest tokens `text` can take under any vocab: the words bert4keras's tokenizer
    splits it into (each Chinese character and punctuation mark alone), each at least one
    token (an unknown word is one [UNK])."""
    from tokenizers import pre_tokenizers

    from mtl_framework.tokenizer import bert4keras_normalizer

    normal = bert4keras_normalizer().normalize_str(text)
    return len(pre_tokenizers.BertPreTokenizer().pre_tokenize_str(normal))


def prefix_problems(task, max_length):
    """[(key, message)] for a prefix that leaves no room for the text at `max_length`
    ([CLS] prefix + text [SEP]): every text would encode as the prefix alone, one vector."""
    problems = []
    for key in PREFIXES:
        prefix = embedding_settings(task)[key]
        least = least_tokens(prefix) if prefix else 0
        if least >= max_length - 2:
            side = "query" if key == "query_prefix" else "passage"
            problems.append((key, f"embedding.{key} takes at least {least} tokens, and "
                             f"max_length {max_length} holds {max_length - 2} besides [CLS] and "
                             f"[SEP]: every {side} would be cut to the prefix alone (one vector "
                             "for any text): shorten the prefix or raise max_length"))
    return problems


def text_id(text):
    """A text's id for telling duplicates apart (31 bits of its SHA-1): the same passage
    answering two queries of one batch is not a negative of either."""
    return int.from_bytes(hashlib.sha1(text.encode("utf-8")).digest()[:4], "little") & 0x7FFFFFFF


class ContrastiveFeaturizer(Featurizer):
    """Each example -> its texts' rows, query first, then the positive and the negatives
    (up to 64 kept; a batch uses `hard_negatives` of them), + its score and positive id."""

    example_types = CONTRASTIVE.examples
    family = CONTRASTIVE.name
    defaults = {key: default for key, (_, default, acts) in EMBEDDING_SETTINGS.items()
                if "features" in acts.split()}
    MOST_NEGATIVES = 64

    def __init__(self, *args, scored_negatives=None, **settings):
        super().__init__(*args, **settings)
        if scored_negatives is not None:  # a reranking task's (feature_settings); only then
            self.settings["scored_negatives"] = scored_negatives  # in the cache key

    def start(self, writer):
        super().start(writer)
        writer.add(CHOICES, np.zeros(1, np.int64))
        writer.add("score", np.zeros(0, np.float32))
        writer.add("positive_id", np.zeros(0, np.int32))
        writer.add("query_id", np.zeros(0, np.int32))
        self.text_rows = 0

    def pair(self, example, report):
        """(query, positive, negatives, score) of an example, or None after counting why not."""
        if isinstance(example, PairExample):
            query, positive, negatives, score = (example.query, example.positive,
                                                 list(example.negatives), example.score)
        elif isinstance(example, SpanQAExample):
            if not example.answers:
                report.dropped["no answer in the passage (not a positive pair)"] += 1
                return None
            query, positive, negatives, score = example.question, example.context, [], None
        else:
            if example.text_b is None:
                report.dropped["no text_b (the positive)"] += 1
                return None
            query, positive, negatives, score = example.text, example.text_b, [], example.label
        if score is not None:
            score = float(score)
        elif self.settings["loss"] == "cosent":
            report.unlabelled += 1  # kept (`mtl predict` reads no gold); CoSENT skips it
        if (score is not None and self.settings["loss"] == "infonce"
                and score < self.settings["positive_score"]):
            report.dropped["score below positive_score (not a positive pair)"] += 1
            return None
        if len(negatives) > self.MOST_NEGATIVES:
            report.truncated[f"over {self.MOST_NEGATIVES} negatives (the first kept)"] += 1
            negatives = negatives[:self.MOST_NEGATIVES]
        return query, positive, negatives, score

    def encode_chunk(self, chunk, writer, report):
        pairs = [p for p in (self.pair(e, report) for e in chunk) if p is not None]
        query_prefix, passage_prefix = self.settings["query_prefix"], self.settings["passage_prefix"]
        texts = []
        for query, positive, negatives, _ in pairs:
            texts += [query_prefix + query, passage_prefix + positive]
            texts += [passage_prefix + n for n in negatives]
        encoded = self.encode(texts) if texts else []
        splits, scores, ids, query_ids, at = [], [], [], [], 0
        for query, positive, negatives, score in pairs:
            count = 2 + len(negatives)
            if any(truncated for _, truncated in encoded[at:at + count]):
                report.truncated["text over max_length"] += 1
            at += count
            self.text_rows += count
            splits.append(self.text_rows)
            scores.append(math.nan if score is None else score)
            ids.append(text_id(positive))
            query_ids.append(text_id(query))  # a query's positives judged together (mteb's qrels)
        self.write_tokens(writer, [encoding for encoding, _ in encoded])
        writer.add(CHOICES, np.array(splits, np.int64))
        writer.add("score", np.array(scores, np.float32))
        writer.add("positive_id", np.array(ids, np.int32))
        writer.add("query_id", np.array(query_ids, np.int32))


def collate_pairs(features, rows, rng, pad_to):
    """[B, K, L] token rows (query, positive, up to `hard_negatives` negatives, drawn with
    `rng` when there are more, the first ones without it; every stored one in a scored
    split of a task scored by reranking), text_mask [B, K]."""
    text_splits = features[CHOICES]
    settings = features.meta["settings"]
    wanted = settings.get("hard_negatives", 0)
    if settings.get("scored_negatives") == "all" and features.meta.get("split") != "train":
        wanted = ContrastiveFeaturizer.MOST_NEGATIVES
    picked = []
    for row in rows:
        first, end = int(text_splits[row]), int(text_splits[row + 1])
        negatives = np.arange(first + 2, end)
        if len(negatives) > wanted:
            negatives = (np.sort(rng.choice(negatives, wanted, replace=False)) if rng is not None
                         else negatives[:wanted])
        picked.append(np.concatenate([[first, first + 1], negatives]).astype(np.int64))
    most = max(len(p) for p in picked)
    length = batch_length(features, rows, pad_to)
    batch = {}
    for name in ("token_ids", "segment_ids"):
        out = np.zeros((len(rows), most, length), np.int32)
        for b, texts in enumerate(picked):
            out[b, :len(texts)] = pad_rows(features, name, texts, length)
        batch[name] = out
    counts = np.array([len(p) for p in picked])
    batch["text_mask"] = (np.arange(most)[None] < counts[:, None]).astype(np.float32)
    batch["score"] = np.asarray(features["score"][rows], np.float32)
    batch["positive_id"] = np.asarray(features["positive_id"][rows], np.int32)
    batch["query_id"] = np.asarray(features["query_id"][rows], np.int32)
    return batch


def similarity_output(prediction, example, labels, features, row):
    """`mtl predict` on a contrastive task: the cosine of the query and its positive. A pairs
    row with several positives gives a line for each: the line names the positive it scored,
    or its lines could not be told apart from the next rows'."""
    output = {"cosine": float(prediction["cosine"])}
    if isinstance(example, PairExample):
        output["positive"] = example.positive
    return output


def pair_examples(texts):
    """Raw (query, passage) pairs as text pairs (the featurizer reads text_b as the positive)."""
    return [TextExample(*text) if isinstance(text, (tuple, list)) else TextExample(text)
            for text in texts]


PAIR_BATCH = {"token_ids": ("int32", 3), "segment_ids": ("int32", 3),
              "text_mask": ("float32", 2), "score": ("float32", 1), "positive_id": ("int32", 1),
              "query_id": ("int32", 1)}
FAMILY = Family(CONTRASTIVE.name, ContrastiveFeaturizer, collate_pairs, PAIR_BATCH,
                choice_axis=True, rows_coupled=True, head_settings=head_settings,
                feature_settings=feature_settings,
                output=similarity_output, from_texts=pair_examples, two_texts=True,
                hub_task="sentence-similarity", train_problem=train_problem)
FAMILIES = (FAMILY,)
