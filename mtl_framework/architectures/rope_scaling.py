"""The backbone's `rope_scaling` setting: what it may hold and how the CLI spells it.

    rope_scaling: {type: linear | ntk | dynamic_ntk, factor: F, original_max_length: N}

`null` (the default) is the rotary of training. The maths is in
`layers.rotary_inverse_frequency` (the one place rotary tables are built);
this module only checks and normalises the setting, without Keras, so an
experiment or a command line can be refused before TensorFlow is imported.

`original_max_length` is the length the model was trained at (Hugging Face's
`max_position_embeddings`). Only `dynamic_ntk` reads it (its base grows with a
sequence once it is longer than that); `mtl train` fills it from the
experiment's max_length, `mtl evaluate` / `mtl predict` from the run's.
"""

TYPES = ("linear", "ntk", "dynamic_ntk")
KEYS = ("type", "factor", "original_max_length")
HF_NAMES = {"dynamic": "dynamic_ntk"}  # theirs -> ours, for messages
# The largest factor taken: 1024x the trained length is past any context this backbone is
# used at, and an ntk base grown by more overflows float32 (inf or 1e308 is a typo).
MAX_FACTOR = 1024.0


def normalise(value, original_max_length=None, where="rope_scaling"):
    """The setting as a plain dict {type, factor (float), original_max_length (int or None)},
    or None for none; ValueError (one line naming `where` and the fix) for anything else.
    `original_max_length` fills the key when the value does not give it."""
    if value is None or value == "none":
        return None
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be a mapping {{type: {' | '.join(TYPES)}, factor: F}} "
                         f"or null, got {value!r}")
    unknown = sorted(set(value) - set(KEYS))
    if unknown:
        hint = " (Hugging Face's rope_type is our type)" if "rope_type" in unknown else ""
        raise ValueError(f"{where}: unknown key(s) {unknown}{hint}; known: {', '.join(KEYS)}")
    kind = value.get("type")
    if kind not in TYPES:
        hint = f" (Hugging Face's {kind!r} is ours {HF_NAMES[kind]!r})" if kind in HF_NAMES else ""
        raise ValueError(f"{where}.type must be one of {', '.join(TYPES)}, got {kind!r}{hint}")
    factor = value.get("factor")
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or \
            not 1 <= factor <= MAX_FACTOR:  # NaN and inf fail too
        raise ValueError(f"{where}.factor must be a finite number from 1 to {MAX_FACTOR:g} "
                         f"(the length multiple to stretch to), got {factor!r}")
    length = value.get("original_max_length", original_max_length)
    if length is not None and (isinstance(length, bool) or not isinstance(length, int)
                               or length < 2):
        raise ValueError(f"{where}.original_max_length must be an integer >= 2 (the trained "
                         f"length), got {length!r}")
    if kind == "dynamic_ntk" and length is None:
        raise ValueError(f"{where}: dynamic_ntk needs original_max_length (the length the "
                         "model was trained at)")
    return {"type": kind, "factor": float(factor), "original_max_length": length}


def parse(text, original_max_length=None, where="--rope-scaling"):
    """`none`, `TYPE:FACTOR` or `TYPE:FACTOR:ORIGINAL_MAX_LENGTH` (the CLI form) as
    `normalise` returns it."""
    if text == "none":
        return None
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise ValueError(f"{where} {text!r}: expected TYPE:FACTOR (TYPE one of "
                         f"{', '.join(TYPES)}, e.g. linear:4) or none")
    value = {"type": parts[0]}
    try:
        value["factor"] = float(parts[1])
        if len(parts) == 3:
            value["original_max_length"] = int(parts[2])
    except ValueError:
        raise ValueError(f"{where} {text!r}: FACTOR must be a number and ORIGINAL_MAX_LENGTH "
                         "an integer (e.g. ntk:4 or dynamic_ntk:4:128)") from None
    return normalise(value, original_max_length, where)


def describe(scaling):
    """'none' or 'linear x4 (trained at 128)', for logs and tables."""
    if not scaling:
        return "none"
    factor = f"{scaling['factor']:g}"
    trained = scaling.get("original_max_length")
    return f"{scaling['type']} x{factor}" + (f" (trained at {trained})" if trained else "")
