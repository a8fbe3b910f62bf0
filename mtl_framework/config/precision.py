"""Which precision a run computes in: an experiment's `precision`, and what `auto` (the
default) settles on.

`auto` is mixed_bfloat16 where the CPU multiplies bfloat16 matrices natively (AMX or
AVX512-BF16 in /proc/cpuinfo) and float32 elsewhere, and on JAX. It is settled once, when
a run starts, and the run's experiment.yaml keeps the policy itself, so a run resumes,
evaluates and predicts in what it trained in, on any CPU. A run from before `auto` became
the default names no precision: it trained in float32. Nothing here imports TensorFlow
(plan.py runs before it is loaded); the Keras policy is applied by
step/distributed.py's precision_policy.
"""
from mtl_framework.config.experiment import PRECISION, PRECISION_ENV
from mtl_framework.rundir.provenance import keras_backend

# /proc/cpuinfo flags of x86 CPUs that multiply bfloat16 matrices natively (Intel AMX
# tiles; AVX512-BF16 dot products): oneDNN's bfloat16 matmuls run about 2x float32 there.
NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16")
CPUINFO = "/proc/cpuinfo"  # where they are read (tests point it at a file of their own)
AS_NAMED = "as the experiment says"  # the why of a precision the experiment names


def native_bf16_flags(cpuinfo=None):
    """The `NATIVE_BF16_FLAGS` this CPU reports ([] where none, or where cpuinfo is unreadable)."""
    try:
        with open(cpuinfo or CPUINFO, encoding="utf-8", errors="replace") as f:
            flags = next((line.split(":", 1)[1].split() for line in f
                          if line.startswith("flags")), [])
    except OSError:
        return []
    return [flag for flag in NATIVE_BF16_FLAGS if flag in flags]


def resolve_precision(precision, cpuinfo=None):
    """(Keras dtype policy, why) for an experiment's `precision`: itself, or for `auto`
    mixed_bfloat16 where the CPU does bfloat16 matrix work natively, float32 elsewhere
    and on JAX (XLA's CPU backend runs our bfloat16 step slower than its float32 one:
    0.89x, bench/results/backbone.md)."""
    if precision not in PRECISION:
        raise ValueError(f"precision must be one of {PRECISION}, got {precision!r}")
    if precision != "auto":
        return precision, AS_NAMED
    if keras_backend() == "jax":
        return "float32", "auto: on JAX, whose CPU backend runs bfloat16 slower than float32"
    flags = native_bf16_flags(cpuinfo)
    if flags:
        return "mixed_bfloat16", f"auto: the CPU multiplies bfloat16 natively ({', '.join(flags)})"
    return "float32", ("auto: the CPU reports neither " + " nor ".join(NATIVE_BF16_FLAGS)
                       + " (bfloat16 would be emulated, slower than float32)")


def run_precision(experiment, stored=None):
    """(Keras policy, why) a run computes in. A precision named other than `auto` is
    kept; `stored`, the experiment.yaml of a run that has trained (a mapping:
    RunDir.stored_experiment), keeps the policy it records (`recorded_precision`);
    otherwise $MTL_PRECISION where set, else `auto` settled by this CPU
    (`resolve_precision`)."""
    named = experiment.raw.get("precision")
    if named not in (None, "auto"):
        return named, AS_NAMED
    if stored is not None and stored.get("precision") != "auto":
        policy = recorded_precision(stored)
        return policy, f"the run's own: it trained in {policy} (experiment.yaml)"
    if named is None and experiment.precision != "auto":
        return experiment.precision, f"as ${PRECISION_ENV} says"
    return resolve_precision("auto")


def recorded_precision(stored):
    """The policy a run's experiment.yaml (a mapping) says it trained in: its `precision`;
    `auto`, as runs kept it before they recorded the policy, is this CPU's choice; none
    at all (a run from before `auto` became the default) is float32."""
    value = stored.get("precision", "float32")
    return resolve_precision("auto")[0] if value == "auto" else value
