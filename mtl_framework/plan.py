"""Everything about a training run that can be checked before anything is built or written.

    plan = plan_run("experiments/demo.yaml", output=None, data_root=None, resume=False)

`mtl train` calls this before TensorFlow is even imported, and `loop.run.Run`
builds from the plan: an experiment with a mistake in it (an unknown task, a
missing data or label file, `lr: fast`, a vocab that does not fit the
checkpoint's embedding table, a run directory that holds another run) fails
in about a second with one `file:line: message` line per problem, and the run
directory is left exactly as it was. The run's own files (experiment.yaml,
vocab.txt) are written by `Run.train` only once every check has passed.

Checked here, in order: the experiment file (experiment.py), the run directory
and data root paths, the task specs and task names, each task's train files
and label files, the vocab and its size against a checkpoint's embedding
table, and (with `resume` given) that the run directory is free for a new run
or holds a run of this same experiment.
"""
import dataclasses
import json
import os
from dataclasses import dataclass, field

from mtl_framework import architectures, formats
from mtl_framework.config.experiment import (
    DEFAULTS,
    MLM_TASK,
    STEP_BACKBONE_KEYS,
    Experiment,
    ExperimentError,
    load_experiment,
)
from mtl_framework.config.precision import AS_NAMED, recorded_precision, run_precision
from mtl_framework.config.registry import UnknownTaskError, load_registry
from mtl_framework.config.spec_schema import EMBEDDING_TYPE
from mtl_framework.families import MLM
from mtl_framework.families.contrastive import embedding_settings
from mtl_framework.files import check_folder
from mtl_framework.rundir import RunDir
from mtl_framework.rundir.checkpoint import read_trainer
from mtl_framework.rundir.trained_on import check_vocab, matched_task

# What a resumed run may change: how long it goes on, how it checkpoints and scores,
# and where things are. Anything else (tasks, batch size, model, optimizer, seed, ...)
# would continue the checkpoint with another experiment than the one that wrote it.
RESUMABLE = ("steps", "checkpoint_every", "keep_checkpoints", "eval_every", "eval_batches",
             "distribution", "name", "output_dir", "data_root", "cache_dir", "task_specs",
             "patience")
# Backbone values an experiment may set over a backbone folder's config (not shapes).
INIT_OVERRIDES = ("dropout", "attention_dropout", "alpha_warmup_steps", "exact_padding",
                  "rope_scaling")
# Backbone values a checkpoint or export does not fix (the rest must equal its config).
BACKBONE_OVERRIDES = INIT_OVERRIDES + STEP_BACKBONE_KEYS + ("checkpoint", "init",
                      "vocab", "vocab_size", "size")  # size: compared as its dims


@dataclass
class Plan:
    """A checked training run: what `loop.run.Run` builds."""
    experiment: Experiment
    run: RunDir  # the run directory, as given (RunDir owns its layout and files)
    data_root: str
    registry: object
    tasks: list  # registry TaskSpecs, MLM excluded
    entries: dict  # task name -> the experiment's {name, rate?, loss_weight?}
    vocab: str | None  # the vocab.txt to use; None: built from the tasks' train text
    checkpoints: list = field(default_factory=list)  # the run directory's step-* folders
    resolved: dict = field(default_factory=dict)  # experiment.yaml as the run directory keeps it
    precision: tuple = ("float32", AS_NAMED)  # (Keras policy, why): run_precision
    # lines for the run's log: what the checks of a record could not check or mapped
    notes: list = field(default_factory=list)

    @property
    def run_dir(self):
        return self.run.path

    @property
    def record(self):
        """What a resume must match, kept in every checkpoint's trainer.json ("record"), so
        an edited experiment.yaml cannot change it: the resolved experiment but its
        RESUMABLE keys, and each task's settings that shape what it trains (its max_length,
        a contrastive task's `embedding:` settings, defaults filled in), and `steps`, which
        may change but stretches the learning-rate decay (a resume says so). JSON values."""
        experiment = {key: value for key, value in self.resolved.items() if key not in RESUMABLE}
        return json.loads(json.dumps({"experiment": experiment,
                                      "tasks": {t.name: task_record(t) for t in self.tasks},
                                      "steps": self.experiment.steps}, default=str))


def task_record(task):
    """A task's settings that a resume may not change (Plan.record)."""
    record = {"max_length": task.max_length}
    if task.type == EMBEDDING_TYPE:
        record["embedding"] = embedding_settings(task)
    return record


def plan_run(experiment, output=None, data_root=None, resume=None, overrides=()):
    """The Plan for `mtl train EXPERIMENT [--output DIR] [--data-root DIR] [--resume]
    [--set KEY=VALUE ...]`, or a UserError naming every problem. `experiment`: a path or an
    experiment.Experiment. resume None: the run directory is not checked yet."""
    if isinstance(experiment, dict):  # Run({...}): what the YAML would hold, checked as one
        experiment = Experiment.from_dict(experiment, overrides=overrides, label="Run({...})")
    elif not isinstance(experiment, (Experiment, str, os.PathLike)):
        raise ExperimentError(f"an experiment is a file path, an Experiment or a dict of its "
                              f"keys, not {type(experiment).__name__}: {experiment!r:.80}")
    if not isinstance(experiment, Experiment):
        experiment = load_experiment(experiment, overrides)
    run_dir = output or experiment.resolve_path(experiment.raw.get("output_dir")) or \
        os.path.join("runs", experiment.stem)
    root = _data_root(experiment, data_root)
    registry = _registry(experiment)
    entries = {t["name"]: t for t in experiment.tasks}
    tasks = _select(experiment, registry, [n for n in entries if n != MLM_TASK])
    corpus = entries.get(MLM_TASK, {}).get("corpus")
    if not tasks and not corpus:
        raise ExperimentError(f"{experiment.where('tasks')}: the {MLM_TASK!r} task masks the other "
                              "tasks' train text: list at least one other task, or give mlm "
                              "its own `corpus`")
    if corpus and not os.path.exists(experiment.resolve_path(corpus)):
        raise ExperimentError(f"{experiment.where('tasks')}: mlm corpus "
                              f"{experiment.resolve_path(corpus)}: no such file or folder (the "
                              "path is relative to the experiment file)")
    _check_task_files(experiment, tasks, root, training=resume is not None)
    vocab = _vocab(experiment)
    _check_exact_padding(experiment)
    notes = []
    tasks = _init_head_tasks(experiment, tasks, root, notes)
    if MLM_TASK in entries:
        _check_mlm_tie(experiment)
    _check_matryoshka(experiment, tasks)
    _check_prefixes(experiment, tasks)
    _check_batches(experiment, tasks)
    run = RunDir(run_dir)
    checkpoints = run.checkpoint_names()
    precision = run_precision(experiment, run.stored_experiment() if checkpoints else None)
    # the run builds, and its experiment.yaml keeps, the policy itself: a run started
    # under `auto` resumes, evaluates and predicts in what it trained in, on any CPU
    experiment = dataclasses.replace(experiment, raw={**experiment.raw, "precision": precision[0]})
    plan = Plan(experiment, run, root, registry, tasks, entries, vocab,
                checkpoints=checkpoints, resolved=experiment.resolved(root),
                precision=precision, notes=list(dict.fromkeys(notes)))
    if resume is not None:
        check_run_dir(plan, resume)
    return plan


def _check_exact_padding(experiment):
    """exact_padding: true sums the attention softmax in float64, which JAX has only with
    x64 enabled: without it JAX computes float32, its own warning muted with the rest."""
    if experiment.backbone.get("exact_padding") is not True or \
            os.environ.get("KERAS_BACKEND") != "jax":
        return
    import jax

    if not jax.config.jax_enable_x64:
        raise ExperimentError(
            f"{experiment.where('backbone', 'exact_padding')}: exact_padding: true needs "
            "float64, which JAX computes only with JAX_ENABLE_X64=1 (else float32, silently): "
            "set JAX_ENABLE_X64=1, or exact_padding: null (auto) or false")


def _init_head_tasks(experiment, tasks, data_root, notes):
    """The tasks, each checked against the label names its same-named head in a
    `backbone.init` export written --with-heads records (heads.json): as they are, in the
    recorded order (same names: the head is continued; noted), or refused naming the first
    difference."""
    from mtl_framework.formats import keras as preset
    from mtl_framework.formats.json_file import read_json

    folder = experiment.backbone.get("init")
    path = folder and os.path.join(experiment.resolve_path(folder), preset.HEADS_CONFIG)
    if not path or not os.path.isfile(path):
        return tasks
    heads = read_json(path)
    heads = heads if isinstance(heads, dict) else {}
    return [matched_task(task, heads[task.name], data_root, path, notes.append)
            if isinstance(heads.get(task.name), dict) else task for task in tasks]


def _backbone_config(experiment):
    """The backbone config the run will build (from its init folder, or its keys)."""
    backbone = experiment.backbone
    folder = backbone.get("init") or backbone.get("checkpoint")
    if folder:
        folder = experiment.resolve_path(folder)
        config = architectures.read_config(folder, architectures.layout(folder))
    else:
        dims = {k: v for k, v in backbone.items() if k not in BACKBONE_OVERRIDES
                and k not in ("architecture", "activation", "max_positions")}
        config = architectures.backbone_config(backbone.get("architecture"), backbone.get("size"),
                                               **dims)
    return config


def _check_matryoshka(experiment, tasks):
    """A contrastive task's Matryoshka dimensions are prefixes of the pooled vector: none may
    be wider than the backbone's hidden size (it would silently be the whole vector)."""
    wide = [task for task in tasks if task.embedding and task.embedding.get("matryoshka_dims")]
    if not wide:
        return
    hidden = _backbone_config(experiment)["hidden_size"]
    for task in wide:
        too_wide = [d for d in task.embedding["matryoshka_dims"] if d > hidden]
        if too_wide:
            raise ExperimentError(f"{task.spec_path}:{task.line}: task {task.name!r}: "
                                  f"embedding.matryoshka_dims {too_wide} exceed the backbone's "
                                  f"hidden size {hidden}: give dimensions up to {hidden}")


def _check_prefixes(experiment, tasks):
    """A contrastive task's prefixes leave room for the text at the length it trains at."""
    from mtl_framework.families.contrastive import prefix_problems

    for task in tasks:
        if task.type == EMBEDDING_TYPE:
            for _, message in prefix_problems(task, min(task.max_length, experiment.max_length)):
                raise ExperimentError(f"{task.spec_path}:{task.line}: task {task.name!r}: "
                                      f"{message}")


def _check_batches(experiment, tasks):
    """A contrastive task whose only candidates are its batch-mates' positives needs a batch
    of two or more (its train rows are checked once read: contrastive.train_problem)."""
    from mtl_framework.families.contrastive import batch_problem

    for task in tasks:
        problem = batch_problem(task, experiment.batch_size) if task.type == EMBEDDING_TYPE \
            else None
        if problem:
            raise ExperimentError(f"{experiment.where('batch_size')}: {problem}")


def _check_mlm_tie(experiment):
    """The mlm head scores against the token embedding: it must be hidden_size wide
    (ALBERT's factorised embedding is not)."""
    config = _backbone_config(experiment)
    width = config.get("embedding_size") or config["hidden_size"]
    if width != config["hidden_size"]:
        raise ExperimentError(
            f"{experiment.where('tasks')}: the {MLM_TASK!r} head ties to the token embedding, "
            f"{width} wide, but hidden_size is {config['hidden_size']}: drop {MLM_TASK!r}, or "
            "use embedding_size = hidden_size")


MLM_SETTINGS = ("whole_word", "mask_rate")  # mlm entry keys passed to its featurizer


def mlm_settings(entry):
    """The featurizer settings an mlm entry gives (whole_word, mask_rate)."""
    return {key: entry[key] for key in MLM_SETTINGS if key in entry}


def mlm_corpus_task(experiment, entry):
    """The TaskSpec of an mlm entry's `corpus`: a text file or a folder of them (one
    document per line, the `text_lines` format), relative to the experiment file."""
    from mtl_framework.config.registry import TaskSpec

    return TaskSpec(name=MLM_TASK, dataset="mlm_corpus", type=MLM, format="text_lines",
                    files={"train": experiment.resolve_path(entry["corpus"])}, options={},
                    fields={}, labels=None, label_file=None, multi_label=False,
                    max_length=experiment.max_length, metric="none", spec_path=experiment.path)


def vocab_sources(plan):
    """What a from-scratch run's vocab is counted from: the tasks' train text and the
    mlm entry's corpus, if it has one."""
    mlm = plan.entries.get(MLM_TASK, {})
    return list(plan.tasks) + ([mlm_corpus_task(plan.experiment, mlm)] if mlm.get("corpus")
                               else [])


def check_run_dir(plan, resume):
    """Without --resume the run directory must not hold another run; with --resume its
    checkpoints must come from this same experiment (RESUMABLE keys may differ)."""
    run, run_dir, experiment = plan.run, plan.run_dir, plan.experiment
    if os.path.exists(run_dir) and not os.path.isdir(run_dir):
        raise ExperimentError(f"{run_dir}: is a file, not a run directory: --output a folder")
    check_writable(run_dir)
    stored_path = run.experiment_path
    if not os.path.exists(stored_path) and not plan.checkpoints:
        foreign = not_a_run(run_dir)
        if foreign:
            raise ExperimentError(
                f"{run_dir}: holds {', '.join(foreign[:3])}{' ...' if len(foreign) > 3 else ''} "
                "but no run (no experiment.yaml): a run would replace or append to such "
                "files; --output a new or empty folder")
    if not resume:
        if plan.checkpoints:
            raise ExperimentError(
                f"{run_dir}: already holds checkpoints ({plan.checkpoints[-1]}): pass --resume to "
                "continue that run, or --output a new directory")
        if os.path.exists(stored_path) and _differences(plan, stored_path):
            raise ExperimentError(
                f"{stored_path}: the run directory already holds another experiment's run: "
                "--output a new directory (or --resume it with its own experiment)")
        return
    if not plan.checkpoints:
        return  # nothing trained yet: a fresh start
    for path in (run.experiment_path, run.vocab_path):
        if not os.path.exists(path):
            raise ExperimentError(f"{run_dir}: holds checkpoints but no {os.path.basename(path)}, "
                                  "so they cannot be matched to this experiment: --output a new "
                                  "directory")
    checkpoint = run.checkpoint_path(plan.checkpoints[-1])
    trainer = read_trainer(checkpoint)
    recorded = (trainer or {}).get("record")
    problems = _differences(plan, stored_path, recorded if isinstance(recorded, dict) else None,
                            os.path.join(checkpoint, "trainer.json"))
    if problems:
        raise ExperimentError("\n".join(problems))
    if plan.vocab and not same_tokens(plan.vocab, run.vocab_path):
        raise ExperimentError(
            f"{experiment.where('backbone', 'vocab')}: the vocab {plan.vocab} differs from "
            f"{run.vocab_path}, which the run was trained with: use that "
            "one to resume, or --output a new directory")
    own, rows = run.vocab_path, _checkpoint_vocab_size(trainer)
    if rows is not None and _vocab_size(own, own) != rows:
        raise ExperimentError(
            f"{own}: {_vocab_size(own, own)} tokens, but the checkpoint {plan.checkpoints[-1]} "
            f"has {rows} embedding rows: the run's vocab was cut or replaced; restore it")
    if trainer is not None:  # else the resume falls back past it: check_fallback
        _check_trained_on(plan, trainer, checkpoint)
        _check_record(plan, trainer, checkpoint)


def check_fallback(plan, checkpoint, trainer):
    """A resume that fell back past damaged newer checkpoints starts from `checkpoint`: the
    experiment, what it trained on and its recorded settings are checked against that one's
    trainer.json, as check_run_dir checks the newest (before anything is moved aside)."""
    source = os.path.join(checkpoint, "trainer.json")
    recorded = trainer.get("record")
    problems = _differences(plan, plan.run.experiment_path,
                            recorded if isinstance(recorded, dict) else None, source)
    if problems:
        raise ExperimentError("\n".join(problems))
    _check_trained_on(plan, trainer, checkpoint)
    _check_record(plan, trainer, checkpoint)


def _check_record(plan, trainer, checkpoint):
    """A resume continues the task settings the checkpoint records it trained with
    (Plan.record; its experiment part: _differences), whatever the specs say now. A
    checkpoint written before the record is checked against experiment.yaml alone (a note
    says so)."""
    source = os.path.join(checkpoint, "trainer.json")
    recorded = trainer.get("record")
    if not isinstance(recorded, dict):
        note = (f"note: {source} records no settings (written by an older version): the "
                "resume was checked against experiment.yaml only")
        plan.notes += [note] if note not in plan.notes else []  # checked again as it starts
        return
    now, problems = plan.record, []
    old_tasks = recorded.get("tasks") or {}
    for task in plan.tasks:
        if isinstance(old_tasks.get(task.name), dict):
            problems += _task_differences(task, now["tasks"][task.name], old_tasks[task.name],
                                          source)
    if problems:
        raise ExperimentError("\n".join(problems))
    _note_stretched_decay(plan, recorded.get("steps"))


def _note_stretched_decay(plan, recorded_steps):
    """`steps` may change on a resume; with the learning rate decaying over `steps` (every
    `final_lr_fraction` below 1, the default 0), the lr from here on is then another one than
    the run would have had: said once, not refused."""
    optimizer = plan.experiment.raw.get("optimizer") or {}
    steps = plan.experiment.steps
    if not isinstance(recorded_steps, int) or recorded_steps == steps or \
            float(optimizer.get("final_lr_fraction", 0.0)) >= 1:
        return
    note = (f"note: steps is {steps}, {recorded_steps} when the checkpoint was written: the "
            "learning rate decays linearly until `steps` (optimizer.final_lr_fraction "
            f"{optimizer.get('final_lr_fraction', 0.0)}), so from here on it follows the "
            f"{steps}-update schedule, not the {recorded_steps}-update one")
    plan.notes += [note] if note not in plan.notes else []


def _task_differences(task, new, old, source):
    """One message per recorded setting of `task` that differs (embedding.* one by one); a
    setting the record does not hold (added by a later version) is its default: not compared."""
    flat_new, flat_old = _flat(new), _flat(old)
    return [f"{task.spec_path}:{task.line}: task {task.name!r}: {key} is "
            f"{flat_new[key]!r}, the run trained with {flat_old[key]!r} "
            f"({source}): resume with the run's own task settings, or --output a new directory"
            for key in flat_new if key in flat_old and flat_new[key] != flat_old[key]]


def _flat(record):
    """{"embedding.temperature": 0.05, "max_length": 64, ...} of a task record."""
    flat = {}
    for key, value in record.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{sub}": v for sub, v in value.items()})
        else:
            flat[key] = value
    return flat


def _shown(value):
    return "absent" if value is None else repr(value)


def _record_difference(plan, where, new, old, source, edited):
    return (f"{plan.experiment.where(*where)}: {_what_differs(where, new, old)} (recorded in "
            f"{source}, which the run trained with{edited}): resume with the run's own "
            "settings, or --output a new directory")


def _check_trained_on(plan, trainer, checkpoint):
    """A resume continues what the checkpoint records it was trained on: its vocab by
    content and every task's label names in order (task_specs may change, labels may
    not). Records an older version did not write cannot be checked: a note says so."""
    source = os.path.join(checkpoint, "trainer.json")
    notes = []
    check_vocab(plan.run.vocab_path, trainer.get("vocab"), source,
                "restore the run's own vocab.txt, or --output a new directory", log=notes.append)
    heads = trainer.get("heads") or {}
    for task in plan.tasks:
        if task.name in heads:
            matched_task(task, heads[task.name], plan.data_root, source, notes.append,
                         reorder=False, fix="task_specs may change, labels may not (the "
                         "head's outputs are in the recorded order): list the labels as the "
                         "run did, or --output a new directory")
    plan.notes += [note for note in dict.fromkeys(notes) if note not in plan.notes]


# What a run directory holds before its experiment.yaml is written: an older version's
# lock, a fine-tune's record of its settings and `mtl benchmark`'s log of it, and killed
# writes' temporaries.
BEFORE_EXPERIMENT = ("train.lock", "finetune.yaml", "finetune.log")


def not_a_run(run_dir):
    """The entries of an existing folder that no run wrote there yet ([] when none)."""
    if not os.path.isdir(run_dir):
        return []
    return sorted(name for name in os.listdir(run_dir)
                  if name not in BEFORE_EXPERIMENT and ".tmp-" not in name)


def check_writable(run_dir):
    """The run directory can be created and written (checked before any work: an hour of
    feature building never ends in "permission denied")."""
    check_folder(run_dir, "--output")
    if os.path.isdir(run_dir) and not os.access(run_dir, os.W_OK | os.X_OK):
        raise ExperimentError(f"--output {run_dir}: not writable (read-only folder or another "
                              "user's): make it writable, or --output another folder")
    for path in (RunDir(run_dir).checkpoints_path, RunDir(run_dir).logs_path):
        if os.path.isdir(path) and not os.access(path, os.W_OK | os.X_OK):
            raise ExperimentError(f"--output {run_dir}: {path} is not writable: make it "
                                  "writable, or --output another folder")


def _checkpoint_vocab_size(trainer):
    """vocab_size in the newest checkpoint's trainer.json (None when it cannot be read:
    the resume then falls back past it, and checks the one it uses)."""
    try:
        return int(trainer["backbone"]["vocab_size"])
    except (KeyError, TypeError, ValueError):
        return None


def _differences(plan, stored_path, recorded=None, source=None):
    """One message per experiment value that differs from the run's (RESUMABLE keys aside);
    [] when it is the run's experiment. The run's is the checkpoint's record (`recorded`, read
    from `source`) where there is one, else the stored experiment.yaml; each message names
    experiment.yaml's line where that file agrees with the record, and says it was edited
    where not (an edit of the run's own file changes nothing the run trained with)."""
    from mtl_framework.config.yaml_io import read_yaml

    stored_doc = read_yaml(stored_path)
    try:  # values normalised as the new experiment's are (`1e-3` -> 0.001)
        stored = load_experiment(stored_path).raw
    except ExperimentError:
        stored = stored_doc.data if isinstance(stored_doc.data, dict) else {}
    stored = {**stored, "precision": recorded_precision(stored)}  # given: run_precision's
    if recorded is None:
        return [_difference(plan, stored_doc, where, new, old)
                for where, new, old in _changed(plan.resolved, stored)]
    problems = []
    for where, new, old in _changed(plan.record["experiment"], recorded.get("experiment") or {}):
        in_file = _at(stored, where)
        if in_file == old:
            problems.append(_difference(plan, stored_doc, where, new, old))
        else:
            edited = f"; {stored_doc.where(*where)} was edited to {_shown(in_file)}"
            problems.append(_record_difference(plan, where, new, old, source, edited))
    return problems


def _at(experiment, where):
    """The JSON value at key path `where` of an experiment mapping (a key left out: its
    default), as the record holds it, for comparing with the record."""
    value = experiment.get(where[0], DEFAULTS.get(where[0]))
    if where == ("tasks",):
        value = [_task_entry(t) for t in value or []]
    if len(where) > 1:
        value = value.get(where[1]) if isinstance(value, dict) else None
    return json.loads(json.dumps(value, default=str))


def _changed(given, stored):
    """(key path, new, old) of each value of experiment `given` that differs from `stored`
    (RESUMABLE keys aside; a key one leaves out has its default); a mapping's keys one by one."""
    for key in list(given) + [k for k in stored if k not in given]:
        if key in RESUMABLE:
            continue
        new, old = given.get(key, DEFAULTS.get(key)), stored.get(key, DEFAULTS.get(key))
        if key == "tasks":
            new, old = [_task_entry(t) for t in new or []], [_task_entry(t) for t in old or []]
        if new == old:
            continue
        if isinstance(new, dict) and isinstance(old, dict):
            for sub in sorted(set(new) | set(old)):
                resumable = key == "backbone" and sub in STEP_BACKBONE_KEYS  # how, not what
                if new.get(sub) != old.get(sub) and not resumable:
                    yield (key, sub), new.get(sub), old.get(sub)
        else:
            yield (key,), new, old


def _difference(plan, stored_doc, where, new, old):
    return (f"{plan.experiment.where(*where)}: {_what_differs(where, new, old)} "
            f"({stored_doc.where(*where)}): resume with the run's own experiment, or --output a "
            "new directory")


def _what_differs(where, new, old):
    if where == ("tasks",):
        added = [t["name"] for t in new if t not in old]
        dropped = [t["name"] for t in old if t not in new]
        return f"tasks differ (here, not in the run: {added or 'none'}; in the run, not here: " \
               f"{dropped or 'none'})"
    return f"{'.'.join(where)} is {_shown(new)}, the run's is {_shown(old)}"


def _task_entry(entry):
    return {"name": entry} if isinstance(entry, str) else dict(entry)


def _data_root(experiment, data_root):
    data_root, where = experiment.data_root_path(data_root)
    if not os.path.isdir(data_root):
        raise ExperimentError(f"{where} {data_root}: no such folder: set data_root in the "
                              "experiment or pass --data-root DIR (the folder holding the datasets)")
    return data_root


def _registry(experiment):
    spec_dirs = [experiment.resolve_path(d) for d in experiment.task_specs]
    for i, path in enumerate(spec_dirs):
        if not os.path.exists(path):
            raise ExperimentError(f"{experiment.where('task_specs', i)}: task_specs {path}: no such "
                                  "folder or file")
    return load_registry(spec_dirs or None)


def _select(experiment, registry, names):
    unknown = []
    for i, entry in enumerate(experiment.tasks):
        if entry["name"] == MLM_TASK:
            continue
        try:
            registry.select([entry["name"]])
        except UnknownTaskError as error:
            unknown.append(f"{experiment.where('tasks', i)}: {error}")
    if unknown:
        raise ExperimentError("\n".join(unknown))
    _check_listed_once(experiment, registry)
    return registry.select(names)


def _check_listed_once(experiment, registry):
    """A task reached by two entries (its name and its dataset id, or two datasets'): one
    entry's rate and loss_weight would silently win over the other's."""
    first = {}  # task name -> (index, entry name) of the entry that reached it first
    for i, entry in enumerate(experiment.tasks):
        if entry["name"] == MLM_TASK:
            continue
        for task in registry.select([entry["name"]]):
            if task.name not in first:
                first[task.name] = (i, entry["name"])
                continue
            j, other = first[task.name]
            how = lambda name: "" if name == task.name else f" (dataset {name!r})"
            raise ExperimentError(
                f"{experiment.where('tasks', i)}: task {task.name!r} listed twice: tasks[{j}] "
                f"{other!r}{how(other)} and tasks[{i}] {entry['name']!r}{how(entry['name'])} "
                "both select it; keep one entry (a dataset id selects all its tasks)")


def _check_task_files(experiment, tasks, data_root, training=False):
    fix = f"set data_root in {experiment.path} or pass --data-root DIR"
    problems = missing_files(tasks, data_root, "train", fix)
    if training and experiment.raw.get("eval_every"):  # scored as it trains: dev files too
        problems += missing_files([t for t in tasks if "dev" in (t.files or {})], data_root,
                                  "dev", f"{fix}, or set eval_every: 0")
    if problems:
        raise ExperimentError("\n".join(problems))


def missing_files(tasks, data_root, split, fix="pass --data-root DIR"):
    """One `spec:line: message` per file of `split` (and label file) of `tasks` that is not
    there; `fix` says how to point at the data. The adapters read the files later."""
    from data_adapters import MissingDataFile, split_paths
    from mtl_framework.config.registry import LabelFileError

    problems = []
    for task in tasks:
        where = f"{task.spec_path}:{task.line}"
        try:
            split_paths(task, split, data_root)
        except KeyError as error:
            problems.append(error.args[0])
            continue
        except MissingDataFile as error:
            problems.append(error.with_fix(fix))
        if task.labels is None and task.label_file:
            try:
                task.resolve_labels(data_root)
            except FileNotFoundError as error:
                problems.append(str(error))
            except LabelFileError as error:
                problems.append(f"{where}: task {task.name!r}: {error}")
    return problems


def _vocab(experiment):
    """The vocab.txt the experiment names (backbone.vocab, vocab, or the one in
    backbone.init / backbone.checkpoint), checked against the embedding table it
    will index; None when the run builds its own from the tasks' text."""
    backbone = experiment.backbone
    init, checkpoint = backbone.get("init"), backbone.get("checkpoint")
    if init or checkpoint:
        from mtl_framework import architectures

        key = "init" if init else "checkpoint"
        folder = experiment.resolve_path(init or checkpoint)
        kind = architectures.layout(folder, experiment.where("backbone", key))
        config = architectures.read_config(folder, kind)
        config_path = architectures.config_path(folder, kind)
        _check_dims(experiment, key, config, config_path)
    named = ("backbone", "vocab") if backbone.get("vocab") else ("vocab",) \
        if experiment.raw.get("vocab") else None
    if named:
        path = experiment.resolve_path(backbone.get("vocab") or experiment.raw["vocab"])
        where = experiment.where(*named)
    elif init or checkpoint:
        where = experiment.where("backbone", key)
        path = formats.vocab_path(folder)  # a tokenizer.json that splits otherwise: refused
        if path is None:
            raise ExperimentError(f"{where}: backbone.{key} has no vocab.txt (nor tokenizer.json) "
                                  f"in {folder}: give backbone.vocab (the vocab the weights were "
                                  "trained with)")
    else:
        return None
    if not os.path.isfile(path):
        raise ExperimentError(f"{where}: vocab {path}: no such file")
    size = _vocab_size(path, where)
    if (init or checkpoint) and size != config["vocab_size"]:
        raise ExperimentError(
            f"{where}: the vocab {path} has {size} tokens but {config_path} has vocab_size "
            f"{config['vocab_size']} (rows of the embedding table): use the vocab.txt the "
            "weights were trained with")
    if init or checkpoint:  # an export of ours records its vocab by content; a release not
        recorded, holder = formats.recorded_vocab(folder)
        if recorded is not None:
            check_vocab(path, recorded, holder, f"use the vocab.txt the weights were trained "
                        f"with (named at {where})", log=None)
    return path


def _check_dims(experiment, key, config, config_path):
    """Dims the experiment gives beside a checkpoint must be the checkpoint's (they cannot
    change a trained model); init exports are checked the same way when built."""
    asked = {k: v for k, v in experiment.backbone.items() if k not in BACKBONE_OVERRIDES}
    if experiment.backbone.get("size"):
        architecture = experiment.backbone.get("architecture") or architectures.DEFAULT
        asked = {**architectures.presets(architecture).PRESETS[experiment.backbone["size"]], **asked}
    config = {**config, "architecture": architectures.architecture_of(config)}
    if experiment.max_length > config.get("max_positions", experiment.max_length):
        raise ExperimentError(
            f"{experiment.where('max_length')}: max_length {experiment.max_length} > "
            f"max_position_embeddings {config['max_positions']} of {config_path} (its "
            "position table): lower max_length")
    for dim, value in asked.items():
        if config.get(dim) != value:
            raise ExperimentError(
                f"{experiment.where('backbone', dim)}: backbone.{dim} is {value} but {config_path} "
                f"has {config.get(dim)}: drop backbone.{dim} (backbone.{key} fixes the model's "
                "dims) or use another checkpoint")


def same_tokens(path, other):
    """The two vocabs give every token the same id (CRLF or LF, vocab.txt or tokenizer.json)."""
    from mtl_framework.tokenizer import load_vocab

    return load_vocab(path) == load_vocab(other)


def _vocab_size(path, where):
    from mtl_framework.tokenizer import Tokenizer

    try:
        return Tokenizer(path).vocab_size
    except UnicodeDecodeError as error:
        raise ExperimentError(f"{path}: not UTF-8 text ({error.reason}); named at {where}") from None
    except ValueError as error:
        raise ExperimentError(f"{error} (named at {where})") from None
    except OSError as error:  # unreadable (chmod 000), a FIFO that fails
        raise ExperimentError(f"{path}: cannot be read ({error.strerror or error}); named at "
                              f"{where}") from None

