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

publisher_entry() runs the three for mtl_framework.evaluation.dev. NumPy-free, no
TensorFlow: the spec loader imports SCORERS' names.
"""
import dataclasses

from data_adapters import get_adapter
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
