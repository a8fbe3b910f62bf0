"""Publishers' scorers: each task's score as its publisher's own script computes it.

A task names its scorer in its spec (`scorer: cmrc2018`); `metric:` keeps naming the
generic family metric (mtl_framework.scoring.metrics), reported beside it. SCORERS maps each
scorer name to its module. Every module follows one contract:

    SOURCE = {"repository": ..., "path": ..., "commit": ...}   # the official script
             (None where the publisher defines no script: then `NOTE` says what we follow)
    PRIMARY = "f1"               # the figure that is the task's score
    TASK_TYPES = type_names(MRC_SPAN)   # the families it scores (`mtl tasks validate` checks)
    FORMATS = ("squad",)         # the formats whose release files its gold reader reads
    def score(gold, predictions) -> dict[str, float]
    def gold_from_release(task, split, data_root, ids=None) -> gold
    def predictions_from_decoded(task, examples, decoded) -> predictions

- `gold` and `predictions` are Python objects in the publisher's own file formats: what
  the official script json-loads or reads (CMRC 2018: the dev JSON dataset dict, and
  {question id: answer text}). `score` gives fractions in [0, 1] (never x100), one of
  them named PRIMARY; it needs nothing downloaded at run time.
- `gold_from_release` reads the task's release files of `split` (task.files, under
  data_root) as the official script would; `ids` (the ids of the examples scored, for a
  partial evaluation) keeps only those questions / records. Nothing the adapters skip
  for training is dropped here: the release's gold is the gold.
- `predictions_from_decoded` builds the predictions object from the task's examples
  (data_adapters examples of `split`, in read order, as the features were built) and
  `decoded`: per example, what the family's head decodes (mrc_span: the answer text;
  span families: (type, start, end) tuples; classification: the label name ...),
  decoded[i] belonging to examples[i].

publisher_entry() runs the three; `Scoring` is a task's scorer over one split, as
mtl_framework.evaluation.dev scores it. NumPy-free, no TensorFlow: the spec loader imports
SCORERS' names.
"""
import dataclasses

from data_adapters import ReadReport, get_adapter, read_task
from mtl_framework.scoring.scorers import (
    cail2018,
    cjrc,
    cluener,
    cmrc2017,
    cmrc2018,
    cmrc2019,
    duie,
    dureader_checklist,
    dureader_robust,
    webqa,
)

# name -> module, the names a spec's `scorer:` may give
SCORERS = {
    "cmrc2018": cmrc2018,
    "cjrc": cjrc,
    "cmrc2017": cmrc2017,
    "cmrc2019": cmrc2019,
    "dureader_robust": dureader_robust,
    "dureader_checklist": dureader_checklist,
    "webqa": webqa,
    "cluener": cluener,
    "duie": duie,
    "cail2018": cail2018,
}


def get(name):
    """The scorer module `name` (ValueError naming the known ones)."""
    if name not in SCORERS:
        raise ValueError(f"unknown scorer {name!r}; scorers: {', '.join(SCORERS)}")
    return SCORERS[name]


def publisher_entry(task, split, data_root, examples, decoded, ids=None):
    """{"scorer", "figure", "score", "result", "source"} of one task's decoded predictions
    (decoded[i] for examples[i]); `ids`: the example ids scored when only part of the
    split ran (None: all of it)."""
    module = get(task.scorer)
    gold = module.gold_from_release(task, split, data_root, ids)
    result = module.score(gold, module.predictions_from_decoded(task, examples, decoded))
    return {"scorer": task.scorer, "figure": module.PRIMARY, "score": result[module.PRIMARY],
            "result": result}


def score_name(entry):
    """What an evaluation entry's `score` is: "cmrc2018 average" (the publisher's
    figure) or the generic metric's name (older lines, tasks without a scorer)."""
    if entry.get("scorer_figure"):
        return f"{entry['scorer']} {entry['scorer_figure']}"
    return entry.get("metric", "score")


def scoring_task(task, split):
    """The task as read for scoring: for a task with a publisher's scorer, the adapter's
    scoring_options over its options on any split but train (nothing training leaves
    out may leave the score)."""
    extra = getattr(get_adapter(task.format), "scoring_options", {})
    if split == "train" or not extra or not getattr(task, "scorer", None):
        return task
    return dataclasses.replace(task, options={**task.options, **extra})


class Scoring:
    """A task's publisher's scorer over one split: scoring(predictions, features, rows,
    task_family) -> {"figure", "score", "result", "predictions"} or {"note"} where it
    cannot score. predictions: per example (mrc_span: per question) in the family's
    decoded form; task_family: the features' Family (mtl_framework.families)."""

    def __init__(self, task, split, data_root):
        self.task, self.split, self.data_root, self.name = task, split, data_root, task.scorer
        read_as = scoring_task(task, split)
        self.examples = list(read_task(read_as, split, data_root, ReadReport()))
        self.labels = task.resolve_labels(data_root)

    def decoded(self, predictions, features, rows, task_family):
        """mrc_span: {"text"} per question; other families: what `mtl predict` writes."""
        if task_family.windows:
            return [{"text": text} for text in predictions]
        return [task_family.output(p, e, self.labels, features, row)
                for row, (p, e) in enumerate(zip(predictions, self.examples))]

    def references(self, references):
        """Each question's gold texts with the ones no span supports (SpanQAExample.unlocated)."""
        return [list(gold) + [t for t in getattr(e, "unlocated", ()) if t not in gold]
                for gold, e in zip(references, self.examples)]

    def __call__(self, predictions, features, rows, task_family):
        if len(predictions) > len(self.examples):
            return {"note": f"{len(predictions)} predictions for {len(self.examples)} examples: "
                            "features and examples do not pair up; not scored"}
        examples = self.examples[:len(predictions)]
        partial = len(examples) < len(self.examples)
        ids = [e.id for e in examples] if partial else None
        result = publisher_entry(self.task, self.split, self.data_root, examples,
                                 self.decoded(predictions, features, rows, task_family), ids)
        return {**result, "predictions": len(predictions)}

    def with_figure(self, entry, publisher, majority, features, rows, task_family):
        """The evaluation entry with the publisher's figure (`publisher`: this scorer's
        result) as its score, the generic one beside it; the baseline is this scorer on
        the majority predictions (None without them)."""
        if "note" in publisher:
            return {**entry, "scorer": self.name, "scorer_note": publisher["note"]}
        baseline = None
        if majority is not None:
            constant = [majority[0]] * publisher["predictions"]
            baseline = self(constant, features, rows, task_family)
        return {**entry, "scorer": self.name, "scorer_figure": publisher["figure"],
                "scorer_result": publisher["result"], "metric_score": entry["score"],
                "metric_baseline": entry["baseline"], "score": publisher["score"],
                "baseline": None if baseline is None or "note" in baseline else baseline["score"]}
