"""The JSON the CLI prints (`--json`): strict JSON, never NaN or Infinity.

Python's json module writes float("nan") as `NaN` and infinities as `Infinity`, which
no JSON parser but Python's reads (jq, JavaScript, json.loads elsewhere with strict
settings). `finite` replaces each non-finite number by null and says why beside it:
in a mapping, `"mean": NaN` becomes `"mean": null, "mean_not_finite": "nan"`; an item
of a list becomes null (the list keeps its length). `dump` then writes with
allow_nan=False, so a value this misses raises instead of printing non-JSON.
"""
import json
import math
import numbers

NOTE = "_not_finite"  # the suffix of the key that says why a value is null


def _not_finite(value):
    """"nan", "inf" or "-inf" for a non-finite real number; None for anything else."""
    if isinstance(value, numbers.Integral) or not isinstance(value, numbers.Real):
        return None  # ints (bools too) are always finite; strings and the rest are not numbers
    number = float(value)
    if math.isfinite(number):
        return None
    return "nan" if math.isnan(number) else ("inf" if number > 0 else "-inf")


def finite(value):
    """`value` with every non-finite number replaced by null (mappings: and a note)."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            why = _not_finite(item)
            if why is None:
                out[key] = finite(item)
            else:
                out[key] = None
                out[f"{key}{NOTE}"] = why
        return out
    if isinstance(value, (list, tuple)):
        return [None if _not_finite(item) else finite(item) for item in value]
    return value


def dumps(value, **options):
    return json.dumps(finite(value), allow_nan=False, **options)


def dump(value, stream, **options):
    json.dump(finite(value), stream, allow_nan=False, **options)
