"""Export a run's trained backbone in a format of `mtl_framework.formats` (each format's
module writes its files); our own preset with `with_heads` adds heads.json +
heads.weights.npz (task heads for a continued run: experiment `backbone.init`).

Every format also gets README.md (a Hugging Face model card) and provenance.json
(model_card.py); no file of an export holds an absolute path.

The other formats have no residual scale `a`: a run exported before its
warm-up ended (a < 1) has `a` folded into the attention and FFN output kernels,
which is exact because both blocks end in a bias-free linear map.

The run is opened by trained.open_run (reading through rundir.RunDir): the
newest readable checkpoint (a damaged newer one is named in a warning), its backbone and head
arrays only. An export is written
into a temporary folder beside `output` and renamed into place; `output` must be new
or empty, or (--force) wholly an earlier export: its `export-manifest.json` lists every
file the export wrote, and a folder holding anything else (or no manifest) is refused,
so --force never deletes a file of the user's.
"""
from __future__ import annotations

import json
import os
import shutil
import uuid
from typing import TYPE_CHECKING

from mtl_framework import architectures, formats
from mtl_framework.architectures import architecture_of
from mtl_framework.architectures import rope_scaling as rope
from mtl_framework.config.experiment import DEFAULTS
from mtl_framework.errors import UserError
from mtl_framework.files import check_folder
from mtl_framework.formats.keras import save_heads
from mtl_framework.formats.sentence_transformers import export_settings
from mtl_framework.rundir import RunDir
from mtl_framework.rundir.records import TEMPORARY
from mtl_framework.saving.model_card import relative_checkpoint, sentence_embedding_lines, write_card
from mtl_framework.saving.trained import open_run

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

FORMATS = formats.NAMES
# Every file an export wrote (relative path -> size); --force replaces only a folder
# holding exactly these (plus the manifest itself).
MANIFEST = "export-manifest.json"
# The format whose folder sentence-transformers loads: it declares the run's sentence
# embedding (formats/sentence_transformers.py), `--embedding-task` picks whose.
SENTENCE_FORMAT = "transformers"
REPLACED = "-replaced"  # the ending of an earlier export set aside while --force replaces it


def fold_residual_alpha(backbone):
    """Fold the residual scale `a` into the output kernels (in place) and set a = 1.
    norm(x + a*F(x)) with F ending in a bias-free kernel W equals norm(x + F_{aW}(x))."""
    if not hasattr(backbone, "residual_alpha"):  # RoFormerV2's alone
        return 1.0
    alpha = float(backbone.residual_alpha.numpy())
    if alpha != 1.0:
        for layer in backbone.transformer_layers:
            for kernel in (layer.attention.output_kernel, layer.feed_forward.output_kernel):
                kernel.assign(kernel.numpy() * alpha)
        backbone.residual_alpha.assign(1.0)
    return alpha


def export(run_dir: str, fmt: str, output: str, with_heads: bool = False, force: bool = False,
           log: Callable[[str], Any] = print, checkpoint: str | int | None = None,
           embedding_task: str | None = None) -> str:
    """Write the run's backbone to `output` in format `fmt`: of its newest readable
    checkpoint, or `checkpoint` "best" (keep_best's) or a step number. A transformers
    folder declares the sentence embedding the run's contrastive tasks trained (pooling,
    normalisation, prompts); `embedding_task`: that task's, when they differ.

    The export is written into a temporary sibling folder and renamed into place: a
    failed export leaves nothing, and --force leaves nothing of the export it replaces."""
    if fmt not in FORMATS:
        raise UserError(f"--format {fmt!r}: choose one of {FORMATS}")
    if with_heads and not formats.FORMATS[fmt].ours:
        holding = [name for name, row in formats.FORMATS.items() if row.ours]
        raise UserError(f"--with-heads is for --format {' or '.join(holding)}; a {fmt} export "
                        "holds the backbone only")
    if embedding_task is not None and fmt != SENTENCE_FORMAT:
        raise UserError(f"--embedding-task is for --format {SENTENCE_FORMAT} (the folder "
                        f"sentence-transformers loads); a {fmt} export holds no pooling")
    check_output(run_dir, output, force)
    trained = open_run(run_dir, checkpoint, log, precision="float32")  # vocab checked too
    chosen, backbone = trained.checkpoint, trained.backbone
    source = os.path.join(chosen.path, "trainer.json")
    if not formats.FORMATS[fmt].ours and backbone.config.get("rope_scaling"):
        raise UserError(f"{source}: backbone.rope_scaling "  # never dropped silently
                        f"{rope.describe(backbone.config['rope_scaling'])}: --format {fmt} has no "
                        f"way to hold it; export --format {formats.OURS}, or train without "
                        "rope_scaling")
    # refused before writing anything
    architectures.converter(fmt, architecture_of(backbone.config)).check(backbone.config, source)
    embedding = export_settings(chosen.trainer.get("heads") or {}, source, embedding_task) \
        if fmt == SENTENCE_FORMAT else None
    heads = trained.saved_heads() if with_heads else None
    output = os.path.normpath(output)
    parent = os.path.dirname(os.path.abspath(output))
    stem = os.path.basename(os.path.abspath(output)) + TEMPORARY
    try:
        os.makedirs(parent, exist_ok=True)
        for leftover in os.listdir(parent):  # from an export that was killed
            if leftover.startswith(stem):
                put_back_or_remove(os.path.join(parent, leftover), output)
        temporary = os.path.join(parent, stem + uuid.uuid4().hex)
        os.makedirs(temporary)
    except OSError as error:
        raise UserError(f"{output}: cannot write beside it in {parent} ({error.strerror}): give "
                        "--output a folder you can write") from None
    replaced = None
    try:
        write_export(run_dir, fmt, temporary, backbone, chosen, heads, log, embedding)
        write_manifest(temporary)
        if os.path.isdir(output) and os.listdir(output):  # checked above: --force, an export
            check_output(run_dir, output, force)  # again: it may have changed meanwhile
            # renamed aside, not deleted, until the new one is in place: a kill leaves one
            # of them whole under `output` (or, between the two renames, the earlier one
            # aside, which the next export puts back)
            replaced = temporary + REPLACED
            os.replace(output, replaced)
        os.replace(temporary, output)
        if replaced:
            shutil.rmtree(replaced, ignore_errors=True)
    except OSError as error:  # disk full, a read-only folder: nothing of it is left
        if replaced and os.path.isdir(replaced):
            put_back_or_remove(replaced, output)
        raise UserError(f"{output}: the export could not be written ({error.strerror or error}); "
                        "nothing was written (an earlier export there is intact): free space "
                        "or give --output a folder you can write") from None
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return output


def put_back_or_remove(leftover, output):
    """A killed export's folder beside `output`: the earlier export it was replacing, put
    back when `output` is missing (killed between the swap's two renames); else removed."""
    if leftover.endswith(REPLACED) and not os.path.lexists(output):
        os.replace(leftover, output)
    else:
        shutil.rmtree(leftover, ignore_errors=True)


def export_files(directory):
    """{relative path: size} of every file under `directory`, the manifest left out."""
    found = {}
    for root, folders, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            relative = os.path.relpath(path, directory)
            if relative != MANIFEST:
                found[relative] = os.path.getsize(path)
    return found


def write_manifest(directory):
    """export-manifest.json: every file the export wrote, so that --force can tell an
    export of ours from a folder that merely holds a config.json."""
    with open(os.path.join(directory, MANIFEST), "w", encoding="utf-8") as f:
        json.dump({"written_by": "mtl export", "files": export_files(directory)}, f, indent=1,
                  sort_keys=True)
        f.write("\n")


def foreign_files(directory):
    """What in `directory` is not part of the export its manifest lists (a list of
    reasons; empty when the folder is wholly that export)."""
    try:
        with open(os.path.join(directory, MANIFEST), encoding="utf-8") as f:
            listed = json.load(f)["files"]
    except FileNotFoundError:
        return [f"no {MANIFEST}, so not an export of `mtl export`"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        return [f"{MANIFEST} unreadable ({error})"]
    found = export_files(directory)
    extra = sorted(set(found) - set(listed))
    changed = sorted(name for name in set(found) & set(listed) if found[name] != listed[name])
    return [f"{name} is not part of the export" for name in extra] + \
        [f"{name} changed since the export" for name in changed]


def check_output(run_dir, output, force):
    """An export goes into a new or empty folder, or with --force over an earlier export
    (a folder that is not one is refused without offering --force, which would refuse it)."""
    if not os.path.exists(output):
        check_folder(output)  # under a file, or a read-only folder: said before the work
        return
    if os.path.islink(output):
        raise UserError(f"{output}: a symbolic link (to {os.path.realpath(output)}): give "
                        "--output the folder itself, or a new one")
    if not os.path.isdir(output):
        raise UserError(f"{output}: exists and is not a folder: give --output a new folder")
    entries = sorted(os.listdir(output))
    if not entries:
        return
    run, out = os.path.realpath(run_dir), os.path.realpath(output)
    if run == out or run.startswith(out + os.sep):
        raise UserError(f"{output}: holds the run directory {run_dir}, which --force would "
                        "delete: give --output a folder outside the run")
    foreign = foreign_files(output)
    if foreign:
        raise UserError(f"{output}: not wholly an earlier export ({foreign[0]}"
                        + (f", and {len(foreign) - 1} more" if len(foreign) > 1 else "")
                        + "), and --force replaces only that: give --output a new or empty folder")
    if not force:
        raise UserError(f"{output}: holds an earlier export ({len(entries)} entries, e.g. "
                        f"{entries[0]}): pass --force to replace it with this export, or give "
                        "--output a new folder")


def trained_length(run_dir):
    """The longest input the run saw: its experiment's max_length (task lengths are capped
    by it)."""
    return int(RunDir(run_dir).read_experiment().get("max_length") or DEFAULTS["max_length"])


def write_export(run_dir, fmt, output, backbone, checkpoint, heads, log, embedding=None):
    state = {**checkpoint.trainer, "checkpoint": checkpoint.path}
    vocab = RunDir(run_dir).vocab_path
    writer = architectures.converter(fmt, architecture_of(backbone.config))
    if formats.FORMATS[fmt].ours:  # our preset: the run and its heads beside the backbone
        if heads:
            save_heads(output, *heads)
            heads = heads[0]
        writer.save(backbone, output, vocab, extra={
            "run": {"step": state["step"], "tasks": list(state["mixture"]["streams"]),
                    "checkpoint": relative_checkpoint(state["checkpoint"]),
                    "max_length": trained_length(run_dir),
                    **({"vocab": state["vocab"]} if state.get("vocab") else {})},
            "heads": list(heads) if heads else []})
        write_card(output, run_dir, state, fmt, heads)
        return
    alpha = fold_residual_alpha(backbone)
    if alpha != 1.0 and log:
        log(f"residual scale a = {alpha:.4g} (warm-up not finished): folded into the "
            "attention and FFN output kernels")
    if fmt != SENTENCE_FORMAT:
        writer.save(backbone, output, vocab, trained_length(run_dir))
        write_card(output, run_dir, state, fmt)
        return
    writer.save(backbone, output, vocab, trained_length(run_dir), embedding)
    write_card(output, run_dir, state, fmt, use=writer.CARD_USE + sentence_embedding_lines(embedding),
               embedding=embedding)
