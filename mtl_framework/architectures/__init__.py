"""Architectures: one package each, as keras-hub keeps one folder per model.

    architectures/<name>/
        __init__.py   BACKBONE (its class name), TITLE (its name in prose), CONVERTERS
                      ({format: converter module}), NOT_HELD ({format: why not}, optional)
        presets.py    PRESETS (sizes) and backbone_config(size, **dims) (built on
                      `sized_config` below); no Keras
        backbone.py   its keras.Model, a subclass of architectures/backbone.py's
                      `Backbone` (Keras config, embedding sum, parameter count): inputs
                      {"token_ids", "segment_ids"} (token id 0 is padding), output
                      [batch, length, hidden]; `.config` (its keyword
                      arguments, with "architecture" unless it is the default),
                      `.token_embedding` (the MLM head ties to it), `update_residual_alpha`
        layers.py     its blocks where they differ from mtl_framework/layers.py
        <format>.py   a converter per folder format (formats/__init__.py says what one has)

Everything else (families, heads, mixture, balancing, evaluation, predict, export,
finetune, benchmark) sees only that interface and the functions below. A config
without "architecture" is RoFormerV2's (every run and export made before there were
others). Imports run one way: this module -> a backbone -> its converters -> formats;
this module imports no Keras (backbones are imported when one is built).
"""
import importlib
import os

from mtl_framework.errors import UserError
from mtl_framework.formats import FORMATS, OURS, expected, loadable, unreadable_weights

ARCHITECTURES = ("roformer_v2", "bert", "albert")
DEFAULT = "roformer_v2"
PRESET_CONVERTER = "mtl_framework.formats.keras"  # our preset holds every architecture


def package(name):
    if name not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {name!r}: choose one of {', '.join(ARCHITECTURES)}")
    return importlib.import_module(f"mtl_framework.architectures.{name}")


def architecture_of(config):
    """The architecture a backbone config is of."""
    return config.get("architecture") or DEFAULT


def presets(name):
    """The presets module of `name` (sizes, config defaults; no Keras)."""
    package(name)
    return importlib.import_module(f"mtl_framework.architectures.{name}.presets")


def backbone_config(architecture=None, size=None, **dims):
    """The full config of `architecture` (default RoFormerV2) from a size and/or dims;
    ValueError naming what is missing or inconsistent."""
    return presets(architecture or DEFAULT).backbone_config(size, **dims)


def sized_config(name, presets, defaults, size=None, **overrides):
    """What every presets.py's backbone_config starts with: `defaults`, then the preset
    `size` (a name in `presets`), then the overrides that are not None; the dims checked
    (num_layers, hidden_size, num_heads given; hidden_size divisible by num_heads unless
    head_size is given) and intermediate_size (4H) and head_size (H / heads) filled in.
    `name` is the architecture as the ValueErrors say it."""
    if size is not None and size not in presets:
        raise ValueError(f"unknown {name} size {size!r}: choose one of {sorted(presets)} "
                         "or give num_layers/hidden_size/num_heads explicitly")
    config = dict(defaults)
    config.update(presets.get(size, {}))
    config.update({k: v for k, v in overrides.items() if v is not None})
    missing = [k for k in ("num_layers", "hidden_size", "num_heads") if k not in config]
    if missing:
        raise ValueError(f"{name} config needs {missing} (or a size: {sorted(presets)})")
    if "head_size" not in config and config["hidden_size"] % config["num_heads"]:
        # H // heads would silently drop the remainder (hidden 30, 4 heads -> head size 7).
        raise ValueError(f"hidden_size {config['hidden_size']} is not divisible by num_heads "
                         f"{config['num_heads']}: change one, or give head_size explicitly")
    config.setdefault("intermediate_size", 4 * config["hidden_size"])
    config.setdefault("head_size", config["hidden_size"] // config["num_heads"])
    return config


def backbone_class(name):
    module = importlib.import_module(f"mtl_framework.architectures.{name}.backbone")
    return getattr(module, package(name).BACKBONE)


def build_backbone(config):
    """A new (unbuilt) backbone of the architecture `config` names."""
    config = dict(config)
    name = config.pop("architecture", None) or DEFAULT
    return backbone_class(name)(**config)


# --- folders: which format and architecture, and the backbone they hold ------------------

def converter_name(name, architecture=DEFAULT):
    """The module converting `architecture` to and from format `name`, or None."""
    if FORMATS[name].ours:
        return PRESET_CONVERTER
    return package(architecture).CONVERTERS.get(name)


def converter(name, architecture=DEFAULT):
    """The converter module of format `name` for `architecture`; a UserError when that
    architecture has none in this format."""
    dotted = converter_name(name, architecture)
    if dotted is None:
        why = getattr(package(architecture), "NOT_HELD", {}).get(name)
        have = [f for f in FORMATS if converter_name(f, architecture)]
        raise UserError(f"format {name}: " + (why or f"{architecture} has no converter for it "
                                              f"(it has {', '.join(have)})"))
    return importlib.import_module(dotted)


class Found(str):
    """A folder's format name (equal to it as a string), with the architecture found in
    it and the converter that reads it."""

    def __new__(cls, name, architecture):
        found = super().__new__(cls, name)
        found.architecture = architecture
        found.module = converter(name, architecture)
        return found


def candidates():
    """(format, architecture) pairs in the order folders are tried."""
    for name in loadable():
        if FORMATS[name].ours:
            yield name, DEFAULT  # the preset's config names its architecture
            continue
        for architecture in ARCHITECTURES:
            if converter_name(name, architecture):
                yield name, architecture


def layout(directory, source=None):
    """The format of a backbone folder a run can start from, as a `Found` (with its
    architecture); anything else is a UserError naming what a backbone folder holds."""
    where = f"{source}: " if source else ""
    if not os.path.isdir(directory):
        raise UserError(f"{where}{directory}: no such folder; give a backbone folder: {expected()}")
    reasons = []
    for name, architecture in candidates():
        found = converter(name, architecture).detect(directory)
        if found == "":
            if FORMATS[name].ours:
                architecture = architecture_of(converter(name).read_config(directory))
            return Found(name, architecture)
        if found:
            reasons.append(found)
    if reasons:
        raise UserError(f"{where}{directory}: {reasons[0]}")
    raise UserError(f"{where}{directory}: not a backbone folder; expected {expected()}")


def read_config(directory, found):
    """Our backbone config (dims, dropout; "architecture" where not the default) as the
    folder `layout` found declares it."""
    return found.module.read_config(directory)


def config_path(directory, found):
    return os.path.join(directory, found.module.CONFIG_FILE)


def trained_length(directory, found):
    """The length a backbone folder was trained at, where its format records it, else None."""
    return found.module.trained_length(directory)


def load_backbone(directory, found, **overrides):
    """The backbone of a folder `layout` found, with its weights; `overrides` (dropout,
    attention_dropout, alpha_warmup_steps, exact_padding, rope_scaling) replace the
    folder's values, never its dims. A damaged weight file is a UserError."""
    try:
        backbone = build_backbone({**read_config(directory, found), **overrides})
    except ValueError as error:  # an override this architecture has not (rope_scaling on BERT)
        raise UserError(f"{directory}: {error}") from None
    try:
        backbone.build()
        found.module.load_weights(backbone, directory)
    except unreadable_weights() as error:  # truncated or damaged weight files
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UserError(f"{directory}: its {found} weights cannot be read ({reason[:200]}): "
                        "copy or export the folder again") from None
    return backbone


def load_folder(directory, source=None, **overrides):
    """The backbone of a folder in any format `layout` recognises, as `load_backbone`
    builds it; a `rope_scaling` override is stretched from the length the folder was
    trained at (`trained_length`)."""
    found = layout(directory, source)
    if overrides.get("rope_scaling") is not None:
        from mtl_framework.architectures import rope_scaling

        try:
            overrides["rope_scaling"] = rope_scaling.normalise(
                overrides["rope_scaling"], trained_length(directory, found),
                f"{source}: backbone.rope_scaling")
        except ValueError as error:
            raise UserError(str(error)) from None
    return load_backbone(directory, found, **overrides)


def load_preset(directory, **overrides):
    """The backbone of our keras preset folder, of whichever architecture it holds."""
    found = Found(OURS, architecture_of(converter(OURS).read_config(directory)))
    return load_backbone(directory, found, **overrides)
