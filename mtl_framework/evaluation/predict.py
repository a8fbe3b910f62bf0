"""Predictions of a trained run's task heads (or a `--with-heads` keras export's) on new text.

    model = load_model("runs/demo")                       # a run directory or a keras export
    model.predict_file("cluener", "my.json", "out.jsonl")  # one JSON line per input example
    model.predict_texts("cluener", ["浙商银行企业信贷部叶老桂博士"])  # raw strings, in Python
    model.predict_text_lines("afqmc", ["花呗|||借呗"], "|||")  # `mtl predict --text`: JSON lines
    model.predict_clue("submit/")                          # CLUE 1.1 files (see clue.py)

The input is read by the task's adapter (the spec's format, options and fields), its
gold (labels, spans, answers) set aside, featurized as in training (mrc_span: windows
over long contexts; other families cut at max_length as training cuts them), run
through the head in batches and decoded as evaluation decodes (evaluation.predict;
mrc_span: the best span over all windows, families.mrc.best_windows). Each example
becomes `{"id": ..., "prediction": ...}` (`id` only when the input has one):

    classification, matching, coreference   a label name of the spec (multi-label: a list)
    regression                              a number
    mrc_span                                {"text", "start"}: char offset into the context
    multiple_choice, cloze                  {"index", "text"} of the chosen candidate
    extraction_ner       [{"type", "start", "end", "text"}], half-open, text == input[start:end]
    extraction_relation  [{"subject": SPAN, "predicate", "object": SPAN}], SPAN = {"text", "start", "end"}
    extraction_event     [{"event_type", "trigger": SPAN or null,
                           "arguments": [{"role", "text", "start", "end"}]}]
    contrastive          {"cosine"} of the query and its positive; a `pairs` row: also
                         "positive", the text scored (a row with N positives gives N lines)

An example the featurizer cannot take (a coreference span past max_length, a question
without choices), and a row the adapter cannot read (bad JSON, no text), is still
written, as `"prediction": null` with an `"error"` saying why (the unreadable row's
file:line), so the output has one line per input record in input order.

Outputs are checked before the model is loaded (`check_output`): an existing file is
replaced only with `force`, the input never, and its folder must exist.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from typing import TYPE_CHECKING

import numpy as np

from data_adapters import ReadReport
from data_adapters.examples import without_gold
from data_adapters.report import place
from mtl_framework.errors import UserError
from mtl_framework.evaluation import clue
from mtl_framework.evaluation import dev as evaluation
from mtl_framework.families import FAMILIES, family, featurizer_for_task
from mtl_framework.files import check_file, check_folder, usual_mode
from mtl_framework.prepare.stats import default_data_root

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from typing import Any

CHUNK_BATCHES = 8  # batches featurized at once: bounded memory, a progress step each
# ------------------------------------------------------------------ loading


def load_model(path: str, data_root: str | None = None, specs: Iterable[str] = (),
               max_length: int | None = None, log: Callable[[str], Any] | None = print,
               rope_scaling: str | None = None) -> PredictModel:
    """A PredictModel from a run directory (its latest checkpoint) or a keras export
    written with `mtl export --with-heads`. UserError when it is neither.
    rope_scaling: `none` or TYPE:FACTOR[:ORIGINAL] instead of the backbone's own."""
    from mtl_framework.saving.trained import open_trained

    trained = open_trained(path, log=log, rope_scaling=rope_scaling)
    trained.check_length(max_length)  # before anything is built
    experiment = trained.experiment
    if experiment is None:  # an export: the specs and data given
        return PredictModel(trained, list(specs), data_root or default_data_root(), max_length, log)
    spec_dirs = [experiment.resolve_path(d) for d in experiment.task_specs] + list(specs)
    root = data_root or experiment.resolve_path(experiment.raw.get("data_root")) or \
        default_data_root()
    return PredictModel(trained, spec_dirs, root, max_length or experiment.max_length, log)


# ------------------------------------------------------------------ the model


class PredictModel:
    """A backbone with its task heads, the run's vocabulary and the task specs."""

    def __init__(self, trained, spec_dirs, data_root, max_length=None, log=print):
        from mtl_framework.config.registry import SpecValidationError, load_registry
        from mtl_framework.tokenizer import Tokenizer

        self.source, self.data_root, self.max_length = trained.source, data_root, max_length
        self.max_positions = trained.max_positions
        self.log = log or (lambda message: None)
        trained.saved_heads()  # a backbone-only export is refused before anything is built
        # its vocab exists and fits: saving.load checked it (a run's or a folder's)
        self.tokenizer = Tokenizer(trained.vocab)
        try:
            self.registry = load_registry(spec_dirs)
        except SpecValidationError as error:
            raise UserError(str(error).splitlines()[0]) from None
        self.model = trained.model(scored_only=True)  # mlm predicts no task outputs
        self.heads = self.model.heads
        self.trained, self.checked = trained, {}  # task name -> its spec, checked once
        self.predictor = evaluation.TaskPredictor(self.model)

    @property
    def tasks(self):
        """Tasks this model can predict: a head and a spec."""
        return [t for t in self.heads if t in self.registry.tasks]

    def task(self, name):
        """The TaskSpec of a task with a head here, its labels checked against the ones
        the head records (mapped by name when only their order differs), or a UserError
        naming the choices or the first difference."""
        if name not in self.heads:
            raise UserError(f"{self.source}: no head for task {name!r}; its tasks: "
                            f"{', '.join(self.heads) or 'none'}")
        if name not in self.registry.tasks:
            raise UserError(f"{self.source}: task {name!r} has a head but no task spec here "
                            f"({self.registry.searched()}): pass --specs DIR with its YAML")
        if name not in self.checked:
            self.checked[name] = self.trained.task(self.registry.tasks[name], self.data_root)
        return self.checked[name]

    def labels(self, task):
        """The spec's label names, checked against the head's label count."""
        try:
            labels = task.resolve_labels(self.data_root)
        except FileNotFoundError as error:
            raise UserError(f"{error} (pass --data-root)") from None
        head = self.heads[task.name]
        if labels is not None and head.num_labels is not None and len(labels) != head.num_labels:
            raise UserError(f"{task.spec_path}:{task.line}: task {task.name!r} lists "
                            f"{len(labels)} labels, its trained head {head.num_labels}: the "
                            "spec changed since training; predict with the spec it was trained on")
        return labels

    def length(self, task):
        """max_length as training used it: the spec's, capped by the run's (or --max-length)
        and by a learned position table (an export records no run length)."""
        length = min(task.max_length, self.max_length) if self.max_length else task.max_length
        return min(length, self.max_positions or length)

    # --- reading and predicting ------------------------------------------------

    def read(self, task, paths, report=None):
        """The examples of `paths` in the task's format, in file order. Gold filters
        (skip_labels) are off, labels unchecked and the adapter's predict_options on
        (e.g. CLUE test placeholders read as no gold): every row is predicted. A text task's
        text_b is optional unless the task compares two texts (its family's `two_texts`).
        `report.order` (an OrderedReport) then holds, in input order, each example's
        index or an unreadable row's (reason, place)."""
        from data_adapters import get_adapter, read_files

        report = report if report is not None else OrderedReport()
        for path in paths:
            if not os.path.isfile(path):
                raise UserError(f"{path}: no such file (task {task.name!r} reads "
                                f"format {task.format!r})")
        adapter = get_adapter(task.format)
        options = {**{k: v for k, v in task.options.items() if k != "skip_labels"},
                   **adapter.predict_options}
        if "text_b_optional" in adapter.option_keys and not family(task.type).two_texts:
            options["text_b_optional"] = True  # only the fields a prediction needs: tnews' title
        where = f"{', '.join(map(str, paths))} (task {task.name!r}, format {task.format!r})"
        try:
            examples = []
            for example in read_files(task.format, paths, options, task.fields, task.type, None,
                                      report, where=where):
                report.order.append(len(examples))  # after the skips met before it
                examples.append(example)
        except (OSError, ValueError, KeyError, UnicodeDecodeError) as error:
            raise UserError(f"{where}: unreadable ({error})") from None
        if not examples:
            reasons = "; ".join(f"{reason}: {n} (e.g. {', '.join(report.places[('skipped', reason)])})"
                                for reason, n in report.skipped.most_common(3))
            raise UserError(f"{where}: no example could be read"
                            + (f" ({reasons})" if reasons else " (empty file)"))
        return examples, report

    def predict(self, task: Any, examples: Sequence[Any], batch_size: int = 32,
                progress: Callable[[int], Any] | None = None) -> list[tuple[Any, Any, str | None]]:
        """[(example, prediction, error)] in input order; error is None unless the
        featurizer could not take the example (then prediction is None)."""
        labels = self.labels(task)
        featurizer = featurizer_for_task(task, self.tokenizer, self.data_root,
                                           max_length=self.length(task))
        self.truncated = 0
        out, step = [], batch_size * CHUNK_BATCHES
        for start in range(0, len(examples), step):
            chunk = examples[start:start + step]
            out += self._predict_chunk(task, labels, featurizer, chunk, batch_size)
            if progress:
                progress(len(chunk))
        return out

    def _predict_chunk(self, task, labels, featurizer, chunk, batch_size):
        features = featurizer.featurize([without_gold(e) for e in chunk])
        task_family = family(features.family)
        if not task_family.windows and len(features) != len(chunk):
            # The featurizer dropped some (counted in its report): one at a time to know which.
            if len(chunk) == 1:
                reason = next(iter(features.report.dropped), "the featurizer left it out")
                return [(chunk[0], None, reason)]
            return [row for example in chunk
                    for row in self._predict_chunk(task, labels, featurizer, [example], batch_size)]
        self.truncated += sum(features.report.truncated.values())
        head = self.heads[task.name]
        rows = np.arange(len(features))
        predictions, _, windows = evaluation.predict(self.predictor, task.name, head, task_family,
                                                     features, rows, batch_size)
        if task_family.windows:
            return [(e, p, None) for e, p in zip(chunk, task_family.window_outputs(features, windows))]
        shape = task_family.output
        return [(e, shape(p, e, labels, features, row), None)
                for row, (e, p) in enumerate(zip(chunk, predictions))]

    # --- raw strings (Python) -----------------------------------------------------

    def text_examples(self, task, texts):
        """The examples of raw texts, made as the task's family makes them (families:
        `from_texts`; text tasks: a string or a (text, text_b) pair each, NER: strings);
        a UserError for other families, and for a pair task given single strings."""
        texts = list(texts)
        record = family(task.type)
        if record.from_texts is None:
            *most, last = [name for name, f in FAMILIES.items() if f.from_texts]
            raise UserError(f"task {task.name!r} ({task.type}): raw texts are for "
                            f"{', '.join(most)} and {last} tasks; "
                            f"write the input in the task's format and use predict_file "
                            f"(mtl predict --input)")
        single = next((t for t in texts if isinstance(t, str)), None)
        if record.two_texts and single is not None:
            raise UserError(f"task {task.name!r} ({task.type}) compares two texts, got one: "
                            f"{single!r} (mtl predict: --separator SEP and `TEXT SEP TEXT_B`)")
        try:
            return record.from_texts(texts)
        except ValueError as error:
            raise UserError(f"task {task.name!r} ({task.type}): {error}") from None

    def predict_texts(self, task_name: str, texts: Iterable[str | tuple[str, str]],
                      batch_size: int = 32) -> list[Any]:
        """Predictions for raw strings, in order (shaped as `predict_file` writes them): for
        text tasks a string or, for a pair task, (text, text_b) per example; for NER a
        string. A string the featurizer cannot take gets None."""
        task = self.task(task_name)
        examples = self.text_examples(task, texts)
        return [prediction for _, prediction, _ in self.predict(task, examples, batch_size)]

    def predict_text_lines(self, task_name: str, texts: Sequence[str], separator: str | None = None,
                           output_path: str | None = None, batch_size: int = 32) -> dict[str, Any]:
        """`mtl predict --text`: one JSON line per text, `{"text", ["text_b",] "prediction"}`
        (and `"error"` when the featurizer could not take it), to `output_path` (written
        whole) or stdout. `separator` splits each text once into text and text_b."""
        task = self.task(task_name)
        if separator is not None:
            if not family(task.type).two_texts and "text_b" not in (task.fields or {}):
                raise UserError(f"--separator {separator!r}: task {task.name!r} reads one text "
                                f"(its spec {task.spec_path} has no text_b): drop --separator")
            missing = next((t for t in texts if separator not in t), None)
            if missing is not None:
                raise UserError(f"--text {missing!r}: no {separator!r} in it: with --separator, "
                                f"each text is `TEXT{separator}TEXT_B`")
            texts = [tuple(t.split(separator, 1)) for t in texts]
            empty = next((t for t in texts if not t[0].strip() or not t[1].strip()), None)
            if empty is not None:
                raise UserError(f"--text {separator.join(empty)!r}: its "
                                f"{'first' if not empty[0].strip() else 'second'} text is "
                                f"empty: give TEXT{separator}TEXT_B, both non-empty")
        started = time.time()
        rows = self.predict(task, self.text_examples(task, texts), batch_size)
        lines = []
        for example, prediction, error in rows:
            line = {"text": example.text}
            if getattr(example, "text_b", None) is not None:
                line["text_b"] = example.text_b
            line["prediction"] = prediction
            if error is not None:
                line["error"] = error
            lines.append(json.dumps(line, ensure_ascii=False))
        if output_path is None:
            sys.stdout.write("".join(line + "\n" for line in lines))
            sys.stdout.flush()
        else:
            write_atomic(output_path, "\n".join(lines) + "\n")
        summary = {"task": task.name, "output": output_path or "stdout", "examples": len(rows),
                   "lines": len(lines), "skipped_rows": {},
                   "not_featurized": sum(error is not None for _, _, error in rows),
                   "truncated": self.truncated, "seconds": round(time.time() - started, 2)}
        if output_path is not None or summary["not_featurized"] or summary["truncated"]:
            self.log(summary_line(summary, ReadReport(), self.length(task)))
        return summary

    # --- files ------------------------------------------------------------------

    def predict_file(self, task_name: str, input_path: str, output_path: str,
                     batch_size: int = 32) -> dict[str, Any]:
        """Predict every example of `input_path` into `output_path` (JSON lines, input
        order, written whole or not at all); returns a summary dict."""
        task = self.task(task_name)
        check_output(output_path, [input_path], force=True)  # never the input itself
        started = time.time()
        examples, report = self.read(task, [input_path])
        update, close = progress_bar(len(examples), task.name)
        try:
            rows = self.predict(task, examples, batch_size, update)
        finally:
            close()
        lines = [json.dumps(prediction_line(*rows[slot]) if isinstance(slot, int) else
                            {"prediction": None, "error": f"unreadable row ({slot[0]}) at {slot[1]}"},
                            ensure_ascii=False) for slot in report.order]
        write_atomic(output_path, "\n".join(lines) + "\n")
        summary = {"task": task.name, "input": input_path, "output": output_path,
                   "examples": len(rows), "lines": len(lines), "skipped_rows": dict(report.skipped),
                   "not_featurized": sum(error is not None for _, _, error in rows),
                   "truncated": self.truncated, "seconds": round(time.time() - started, 2)}
        self.log(summary_line(summary, report, self.length(task)))
        return summary

    def predict_clue(self, output_dir: str, batch_size: int = 32, force: bool = False) -> dict[str, dict]:
        """Every CLUE 1.1 file the model's tasks can fill from their test splits, written to
        output_dir; returns {"written": {file: rows}, "skipped": {file or task: reason}}.
        Everything is read and predicted before anything is written; a file already in
        output_dir is replaced only with `force` (checked before predicting)."""
        existing = [os.path.join(output_dir, f.name) for f in clue.clue_files_for(self.tasks)
                    if os.path.exists(os.path.join(output_dir, f.name))]
        if existing and not force:
            raise UserError(f"--output {output_dir}: already holds {existing[0]}"
                            + (f" and {len(existing) - 1} more CLUE file(s)" if len(existing) > 1
                               else "") + ": pass --force to replace them, or give a new folder")
        files, skipped = {}, {}
        for clue_file in clue.clue_files_for(self.tasks):
            rows, labels = [], None
            for name in (t for t in clue_file.tasks if t in self.tasks):
                task = self.task(name)
                if "test" not in task.files:
                    skipped[name] = f"no test split in {task.spec_path} (`files: test:`)"
                    continue
                relative = task.files["test"]
                paths = [os.path.join(self.data_root, p)
                         for p in (relative if isinstance(relative, list) else [relative])]
                missing = [p for p in paths if not os.path.isfile(p)]
                if missing:
                    skipped[name] = f"test file not found: {missing[0]} (pass --data-root)"
                    continue
                examples, report = self.read(task, paths)
                if report.skipped:  # a file keyed by id would silently miss those rows
                    reason, n = report.skipped.most_common(1)[0]
                    skipped[name] = (f"{sum(report.skipped.values())} test row(s) unreadable, "
                                     f"e.g. {reason} at {report.places[('skipped', reason)][0]}")
                    continue
                rows.append((task, examples))
            if not rows:
                continue
            problem = clue.id_problem(clue_file, [(e, None) for _, examples in rows
                                                  for e in examples])
            if problem:
                skipped[clue_file.name] = f"{', '.join(t.name for t, _ in rows)}: {problem}"
                continue
            predicted = []
            for task, examples in rows:
                labels = self.labels(task)
                update, close = progress_bar(len(examples), f"{task.name} test")
                try:
                    result = self.predict(task, examples, batch_size, update)
                finally:
                    close()
                failed = [(e.id, error) for e, _, error in result if error is not None]
                if failed:
                    skipped[clue_file.name] = (f"{task.name}: {len(failed)} example(s) not "
                                               f"featurized, e.g. id {failed[0][0]}: {failed[0][1]}")
                    break
                predicted += [(e, p) for e, p, _ in result]
            else:
                files[clue_file.name] = (clue.file_text(clue_file, predicted, labels),
                                         len(predicted))
        if not files:
            reasons = "; ".join(f"{k}: {v}" for k, v in skipped.items())
            raise UserError(f"{self.source}: no CLUE file to write: "
                            + (reasons or f"none of its tasks ({', '.join(self.tasks)}) is a "
                               "CLUE task"))
        try:
            os.makedirs(output_dir, exist_ok=True)
        except OSError as error:
            raise UserError(f"{output_dir}: cannot create the folder ({error.strerror}): give "
                            "--output a folder you can write") from None
        for name, (text, _) in files.items():
            write_atomic(os.path.join(output_dir, name), text)
        return {"written": {name: n for name, (_, n) in files.items()}, "skipped": skipped}


# ------------------------------------------------------------------ output


class OrderedReport(ReadReport):
    """A ReadReport that also keeps the input order of examples and skipped rows
    (adapters read their files in order and yield lazily: a skip recorded before an
    example was yielded came from a row before it). `order`: an example's index, or
    an unreadable row's (reason, file:line)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.order = []

    def skip(self, reason, file, line=None):
        super().skip(reason, file, line)
        self.order.append((reason, place(file, line)))


def same_file(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def check_output(output, inputs=(), model_dir=None, force=False, folder=False,
                 what="predictions"):
    """Refuse, before any work, an output that would lose a file: an input (always), a
    file of the run directory or export predicted from (always), an existing file
    (unless `force`), or a path whose folder is missing or not writable. `folder`: the
    output is a folder (--clue), which may exist. `what`: the output's name in a message."""
    flag = "--output"
    for path in inputs:
        if path and os.path.exists(output) and same_file(output, path):
            raise UserError(f"{flag} {output}: is the input {path}: write the {what} "
                            "to another file")
    if model_dir and os.path.exists(output) and not folder and \
            os.path.realpath(output).startswith(os.path.realpath(model_dir) + os.sep):
        raise UserError(f"{flag} {output}: a file of {model_dir}, which the {what} "
                        "would replace: write them outside it")
    inside = os.path.realpath(output) + os.sep
    if model_dir and folder and inside.startswith(os.path.realpath(model_dir) + os.sep):
        raise UserError(f"{flag} {output}: {model_dir} or a folder inside it (a checkpoint's, "
                        "whose files the CLUE files would mix with or replace): write them "
                        "outside it")
    if folder:
        check_folder(output, flag)
        return
    check_file(output, flag)
    if os.path.exists(output) and not force:
        raise UserError(f"{flag} {output}: exists: pass --force to replace it, or give "
                        "a new file")


def prediction_line(example, prediction, error=None):
    line = {} if example.id is None else {"id": example.id}
    line["prediction"] = prediction
    if error is not None:
        line["error"] = error
    return line


def summary_line(summary, report, max_length):
    parts = [f"{summary['task']}: {summary['examples']} predictions -> {summary['output']} "
             f"({summary['seconds']} s)"]
    for reason, n in report.skipped.most_common():
        places = ", ".join(report.places.get(("skipped", reason), []))
        parts.append(f"{n} row(s) unreadable, written as prediction null: {reason} (e.g. {places})")
    if summary["not_featurized"]:
        parts.append(f"{summary['not_featurized']} example(s) not featurized (prediction null, "
                     "`error` says why)")
    if summary["truncated"]:
        parts.append(f"{summary['truncated']} example(s) longer than max_length {max_length}: "
                     "cut as in training, nothing past the cut is predicted")
    return "\n  ".join(parts)


def progress_bar(total, description):
    """(update(n), close()) of a progress bar on stderr: tqdm on a terminal, else nothing
    (the summary line says what was done)."""
    from mtl_framework.console import progress_bar as bar

    shown = bar(description, total, leave=False, unit="example")
    return shown.update, shown.close


def write_atomic(path, text):
    """Write `text` to `path` whole or not at all (a temporary file beside it, renamed)."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UserError(f"{path}: its folder {directory} does not exist")
    if os.path.isdir(path):
        raise UserError(f"{path}: is a folder: remove it or write elsewhere")
    try:
        handle, temporary = tempfile.mkstemp(dir=directory, prefix=".tmp-predict-")
    except OSError as error:
        raise UserError(f"{path}: cannot write in {directory} ({error.strerror})") from None
    try:
        usual_mode(temporary)  # mkstemp's 0600 would differ from its siblings
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(temporary, path)
    except OSError as error:  # disk full, ...: the temporary goes, the old file stays
        if os.path.exists(temporary):
            os.remove(temporary)
        raise UserError(f"{path}: could not be written ({error.strerror or error}); nothing "
                        "was changed: free space or write elsewhere") from None
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise
