"""Task families, one module each; FAMILIES is the one table of them.

    family(task.type).featurizer             # what a task type needs, from one record
    featurizer = featurizer_for_task(task, tokenizer, data_root)
    features = load_features(folder)         # cached arrays, batchable

Everything that depends on a task's type reads it here: the spec schema's
types, the featurizers and batch functions, the heads (`heads.build_head`),
evaluation's and prediction's special cases, the distributed loss
denominators, the model card's Hub task type, raw-text prediction, data stats.
Adding a family = a module here with its `Family` record(s) (every fact the rest of
the framework needs about it a field of the record; its name and example types a
`TaskType` in data_adapters/task_types.py, the one place the name is spelled, which the
formats read too: tests/test_families.py checks), listed in MODULES, and its head class
beside it in `<module>_heads.py` (`@head_for`), imported by mtl_framework/families/heads.py.
No TensorFlow or Keras is imported here (the spec checks and the feature workers run
before TensorFlow loads); the `_heads` modules import Keras and nothing here imports them.
"""
from mtl_framework.families import choice, contrastive, coreference, mlm, mrc, spans, text
from mtl_framework.families.features import read_features

MODULES = (text, mrc, choice, spans, coreference, contrastive, mlm)
FAMILIES = {f.name: f for module in MODULES for f in module.FAMILIES}
MLM = mlm.FAMILY.name  # the masked-LM family (the experiment's reserved `mlm` task uses it)


def family(name):
    """The Family of a task type; ValueError naming the known ones otherwise."""
    if name not in FAMILIES:
        raise ValueError(f"unknown task type {name!r}; expected one of: {', '.join(FAMILIES)}")
    return FAMILIES[name]


def make_featurizer(family_name, tokenizer, max_length, labels=None, multi_label=False, task="",
                    **settings):
    if family_name not in FAMILIES:
        raise ValueError(f"{task or 'features'}: no featurizer for family {family_name!r}; "
                         f"families: {', '.join(FAMILIES)}")
    record = FAMILIES[family_name]
    featurizer = record.featurizer(tokenizer, max_length, labels, multi_label, task, **settings)
    featurizer.collate = record.collate
    return featurizer


def featurizer_for_task(task, tokenizer, data_root=None, max_length=None, family=None, **settings):
    """The featurizer of a registry TaskSpec (labels resolved, label files read).
    `family=MLM` featurizes the task's texts for masked-LM instead."""
    if family == MLM:
        return make_featurizer(MLM, tokenizer, max_length or task.max_length, task=task.name,
                               **settings)
    labels = task.resolve_labels(data_root) if hasattr(task, "resolve_labels") else task.labels
    settings = {**FAMILIES[task.type].feature_settings(task), **settings} \
        if (family or task.type) == task.type and task.type in FAMILIES else settings
    return make_featurizer(family or task.type, tokenizer, max_length or task.max_length, labels,
                           getattr(task, "multi_label", False), task.name, **settings)


def load_features(directory):
    """Features from a folder of `.npy` files + meta.json, memory-mapped (nothing read yet)."""
    features = read_features(directory)
    features.collate = family(features.family).collate
    return features
