"""The model card (README.md) and provenance.json of an export.

The card is a Hugging Face model card built with huggingface_hub's `ModelCard` /
`ModelCardData`: YAML metadata (language, license, library_name, tags, the
mixture's datasets, base_model when the run started from a backbone folder, and a
model-index of the run's last dev evaluation), then what the run was, its dev
table, how to load the export and which code made it. `provenance.json` holds the
same provenance as JSON: the `mtl train` starts that trained the checkpoint (from
RUN_DIR/provenance.jsonl) and the `mtl export` that wrote it.

No absolute path goes into either: the run is named by its folder's name and the
checkpoint by its path inside the run.
"""
import json
import os

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from mtl_framework import architectures, formats
from mtl_framework.architectures import architecture_of
from mtl_framework.errors import UserError
from mtl_framework.families import FAMILIES
from mtl_framework.rundir import RunDir
from mtl_framework.rundir.provenance import describe, provenance
from mtl_framework.rundir.records import other_settings
from mtl_framework.rundir.run_dir import CHECKPOINTS, EVALUATIONS
from mtl_framework.scoring.scorers import score_name
from mtl_framework.sentence_encoder.settings import SIDES, export_record, trained_config

LICENSE = "apache-2.0"
# Our task families as the Hub's task types (model-index `task.type`, and the card's
# tags): each family's record says its own (families/: `hub_task`).
HUB_TASK_TYPE = {name: record.hub_task for name, record in FAMILIES.items()}
HUB_DATASETS = "https://huggingface.co/datasets/"
def last_dev_evaluation(run_dir, step=None):
    """The last `split: dev` line of RUN_DIR/evaluations.jsonl (of update `step`, when
    one is of it: an export of keep_best's checkpoint shows that evaluation), or None."""
    dev = [line for line in RunDir(run_dir).read_evaluations() if line.get("split") == "dev"
           and not other_settings(line)  # not one at another --max-length/--rope-scaling
           and not partial(line)]  # nor a smoke check (`--max-examples 8 --tasks tnews`)
    at = [line for line in dev if step is not None and line.get("step") == step]
    return (at or dev or [None])[-1]


def partial(line):
    """Whether an evaluations.jsonl line scored only some examples or some tasks
    (`mtl evaluate --max-examples/--tasks`, `mtl finetune --eval-max-examples`)."""
    return "max_examples" in line or "tasks_asked" in line


def run_name(run_dir):
    return os.path.basename(os.path.abspath(run_dir))


def relative_checkpoint(checkpoint_path):
    """`checkpoints/step-N`: the checkpoint's place inside its run."""
    return f"{CHECKPOINTS}/{os.path.basename(os.path.normpath(checkpoint_path))}"


def export_provenance(run_dir, state, fmt, embedding=None):
    """provenance.json of an export: the training starts whose updates the checkpoint
    holds (RUN_DIR/provenance.jsonl lines with a start step before its step), this
    export, and the sentence embeddings the run trained (`embedding_record`)."""
    trained_by = [line for line in RunDir(run_dir).read_provenance() if line["step"] < state["step"]]
    return {"run": run_name(run_dir), "checkpoint": relative_checkpoint(state["checkpoint"]),
            "step": state["step"], "format": fmt, "trained_by": trained_by,
            # the tasks it trained on (the embedding suite flags scores on their datasets)
            "tasks": list(state["mixture"]["streams"]),
            "exported_by": provenance(),
            # what the weights were trained on (rundir/trained_on.py): readers check it
            **({"vocab": state["vocab"]} if state.get("vocab") else {}),
            "embedding": embedding_record(state, embedding)}


def embedding_record(state, settings=None):
    """{task: pooling, normalize, prefixes, matryoshka_dims} of the contrastive tasks the
    export's embedding is (`settings`: export_settings of a transformers folder: its
    tasks), or of every one the run trained; {} for a run that trained none (`mtl encode`
    then says the pooling is a default, not trained)."""
    tasks = settings["tasks"] if settings else None
    return export_record(state.get("heads") or {}, tasks)


def experiment_sources(run_dir):
    """({task: dataset}, base model) from the run's experiment.yaml and registry. A
    dataset read from the Hub is named by its Hub id, any other by our registry's id."""
    from mtl_framework.config.experiment import load_experiment
    from mtl_framework.config.registry import load_registry

    try:  # an experiment.yaml this version no longer reads: the card names tasks only
        experiment = load_experiment(RunDir(run_dir).experiment_file())
    except (UserError, OSError):
        return {}, None
    folder = experiment.backbone.get("init") or experiment.backbone.get("checkpoint")
    base_model = os.path.basename(os.path.normpath(folder)) if folder else None
    try:
        registry = load_registry([experiment.resolve_path(d) for d in experiment.task_specs] or None)
    except (UserError, OSError):  # its spec folders moved: the card names tasks, not datasets
        return {}, base_model
    datasets = {}
    for name in (entry["name"] for entry in experiment.tasks):
        task = registry.tasks.get(name)
        if task is None:  # mlm: the other tasks' text, or a corpus of its own
            continue
        source = registry.datasets[task.dataset].source or ""
        datasets[name] = source[len(HUB_DATASETS):].strip("/") if source.startswith(HUB_DATASETS) \
            else task.dataset
    return datasets, base_model


def eval_results(evaluation, heads, datasets):
    """The model-index entries of a dev evaluation: one per task with a score."""
    results = []
    for task, result in (evaluation or {}).get("tasks", {}).items():
        if not isinstance(result.get("score"), (int, float)):
            continue
        family = (heads or {}).get(task, {}).get("type", "")
        results.append(EvalResult(
            task_type=HUB_TASK_TYPE.get(family, family or "other"),
            dataset_type=datasets.get(task, task), dataset_name=task, dataset_split="dev",
            metric_type=score_name(result),
            metric_value=round(float(result["score"]), 4)))
    return results


def card_data(run_dir, state, fmt):
    datasets, base_model = experiment_sources(run_dir)
    tag = architecture_of(state["backbone"]).replace("_", "-")  # roformer-v2, bert, albert
    model_name = f"{tag}-mtl-{run_name(run_dir)}"
    results = eval_results(last_dev_evaluation(run_dir, state["step"]), state.get("heads"), datasets)
    return ModelCardData(
        language="zh", license=LICENSE, library_name=formats.FORMATS[fmt].library,
        tags=[tag, "multi-task", "mtl_framework", fmt,
              *sorted({r.task_type for r in results})],
        datasets=list(dict.fromkeys(datasets.values())) or None, base_model=base_model,
        model_name=model_name, eval_results=results or None)


def dev_table(run_dir, step=None):
    evaluation = last_dev_evaluation(run_dir, step)
    if evaluation is None:
        return ["not evaluated (run `mtl evaluate RUN_DIR`)"]
    lines = [f"From `{EVALUATIONS}`, step {evaluation.get('step')}"
             + (f", aggregate {evaluation['aggregate']:.4f}"
                if isinstance(evaluation.get("aggregate"), (int, float)) else "") + ":", "",
             "| task | metric | score | majority baseline | examples |", "|---|---|---|---|---|"]

    def number(value):
        return f"{value:.4f}" if isinstance(value, (int, float)) else "-"

    for task, result in evaluation.get("tasks", {}).items():
        lines.append(f"| {task} | {score_name(result)} | {number(result.get('score'))} | "
                     f"{number(result.get('baseline'))} | {result.get('examples', '-')} |")
    return lines


def model_card(run_dir, state, fmt, record, heads=None, use=None):
    """The ModelCard of an export in format `fmt`: metadata, the run, its last dev
    scores, `use` (lines on loading it; default: the format's and the sentence embeddings
    `record` holds), provenance (`record`: export_provenance)."""
    tasks = list(state["mixture"]["streams"])
    config = state["backbone"]
    data = card_data(run_dir, state, fmt)
    lines = [
        f"# {data.model_name}", "",
        f"{architectures.package(architecture_of(config)).TITLE} backbone from mtl_framework, "
        f"run `{record['run']}`, checkpoint "
        f"`{record['checkpoint']}` ({state['step']} optimizer updates)"
        + (f", started from `{data.base_model}`" if data.base_model else "") + ".", "",
        f"Backbone: {config['num_layers']} layers, hidden {config['hidden_size']}, "
        f"{config['num_heads']} heads, FFN {config['intermediate_size']}, "
        f"vocab {config['vocab_size']}.", "",
        f"Trained by supervised multi-task pretraining on {len(tasks)} tasks: "
        f"{', '.join(tasks)}.", "",
        "## Dev scores", "", *dev_table(run_dir, state["step"]),
        "", "## Use", "",
        *(use or architectures.converter(fmt, architecture_of(config)).CARD_USE
          + recorded_embedding_lines(record["embedding"]))]
    if heads:
        lines += ["", f"Task heads included (heads.weights.npz): {', '.join(heads)}; an "
                      "experiment with `backbone: {init: DIR}` starts the heads of tasks with "
                      "the same name from them."]
    elif formats.FORMATS[fmt].ours:
        lines += ["", "Task heads are not included (export with `--with-heads` to keep them)."]
    lines += ["", "## Provenance", ""]
    lines += [f"- trained from step {line['step']} by {describe(line)}"
              for line in record["trained_by"]] or ["- training: not recorded (a run older "
                                                    "than provenance.jsonl)"]
    lines += [f"- exported by {describe(record['exported_by'])}", "",
              "The same as JSON: `provenance.json`."]
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines) + "\n")


POOLINGS = {"cls": "the [CLS] token's vector",
            "mean": "the mean over the real tokens: [CLS], [SEP] and the prompt included"}


def sentence_embedding_lines(settings):
    """The card's lines on the sentence embedding a transformers folder declares:
    `settings` (formats/sentence_transformers.py's export_settings), or None when the run
    trained none (the folder's mean pooling is then a default, not what was trained)."""
    lines = ["", "## Sentence embeddings", ""]
    if settings is None:
        return lines + [
            "This run trained no contrastive task: the pooling was not trained. 1_Pooling/ "
            "holds sentence-transformers' default for a plain encoder (the mean over the real "
            "tokens), not normalised, no prompts: `SentenceTransformer(DIR).encode(texts)`."]
    prompts = settings["prompts"]
    lines += [
        f"As the contrastive task{'s' if len(settings['tasks']) > 1 else ''} "
        f"{', '.join(settings['tasks'])} trained it: pooling `{settings['pooling']}` "
        f"({POOLINGS[settings['pooling']]}), "
        + ("L2-normalised (2_Normalize)" if settings["normalize"] else "not normalised")
        + ", compared by cosine. Prompts (config_sentence_transformers.json, sentence-"
        "transformers 6's names), put before each text: "
        + (", ".join(f"{name} {json.dumps(text, ensure_ascii=False)}"
                     for name, text in prompts.items()) or "none") + ".", "",
        "```python", "from sentence_transformers import SentenceTransformer",
        "model = SentenceTransformer(DIR)",
        "queries = model.encode_query([\"今天天气怎么样\"])      # the `query` prompt",
        "passages = model.encode_document([\"今天晴，气温二十度\"])  # the `document` prompt",
        "scores = model.similarity(queries, passages)", "```", "",
        "(sentence-transformers 3 and 4, which have no encode_query: `model.encode(texts, "
        "prompt_name=\"query\")`"
        + (", `prompt_name=\"document\"`" if "document" in prompts else "") + ".)", "",
        "With transformers alone: prefix the texts with the prompt, then take "
        + ("`last_hidden_state[:, 0]`" if settings["pooling"] == "cls" else
           "the mean of `last_hidden_state` over `attention_mask`")
        + (" and L2-normalise it." if settings["normalize"] else ".")]
    return lines + matryoshka_lines(settings["matryoshka_dims"], settings["normalize"])


def matryoshka_lines(dims, normalize):
    """The card's lines on the Matryoshka dims trained (none: no lines)."""
    if not dims:
        return []
    return ["", f"Matryoshka: the loss was trained on the leading {', '.join(map(str, dims))} "
            "dims of the vector, each compared by cosine (embedding.matryoshka_dims). "
            "`mtl encode DIR --dim N` gives the first N"
            + (", L2-normalised again as trained" if normalize else "") + ". "
            "sentence-transformers' `SentenceTransformer(DIR, truncate_dim=N)` cuts the "
            "vector after its Normalize module and does not re-normalise: compare its vectors "
            "by cosine (`model.similarity`), not by dot product."]


def recorded_embedding_lines(embedding):
    """The card's lines on the sentence embeddings an export records (provenance.json
    "embedding", what `mtl encode DIR` applies): one line per contrastive task, or that the
    run trained none."""
    lines = ["", "## Sentence embeddings", ""]
    if not embedding:
        return lines + [
            "This run trained no contrastive task: `mtl encode DIR` pools by the mean over the "
            "real tokens, not normalised (sentence-transformers' default for a plain encoder), "
            "a default, not a trained pooling."]
    lines.append("As the run trained them (provenance.json `embedding`; `mtl encode DIR` "
                 "applies them, `--task NAME` where they differ):")
    lines.append("")
    for task, config in embedding.items():
        config = trained_config(config)  # a record older than a key: what was trained then
        prefixes = [f"{side} prompt {json.dumps(config[side + '_prefix'], ensure_ascii=False)}"
                    for side in SIDES if config[side + "_prefix"]]
        dims = config["matryoshka_dims"]
        lines.append(f"- `{task}`: pooling `{config['pooling']}`, "
                     + ("L2-normalised" if config["normalize"] else "not normalised")
                     + "".join(", " + p for p in prefixes)
                     + (f", Matryoshka dims {', '.join(map(str, dims))}" if dims else ""))
    return lines


def write_card(directory, run_dir, state, fmt, heads=None, use=None, embedding=None):
    """README.md (the model card) and provenance.json into an export folder (`embedding`:
    the transformers folder's export_settings)."""
    record = export_provenance(run_dir, state, fmt, embedding)
    model_card(run_dir, state, fmt, record, heads, use).save(os.path.join(directory, "README.md"))
    with open(os.path.join(directory, "provenance.json"), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
