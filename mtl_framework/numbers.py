"""The one rule for the numbers of every YAML file read here (experiments, task specs), in
a module of its own so that config/ and families/ both use it without importing each other."""
import math


def yaml_number(value):
    """A finite number from an int, a float or a numeric string, else None: the one rule for
    the numbers of every YAML file read here (experiments, task specs). YAML 1.1 reads `1e-3`
    (no dot) as a string, which is meant as a number; `.inf`, `.nan` and `true` are not."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, int) or isinstance(value, float) and math.isfinite(value):
        return value
    return None
