"""`precision: auto`: mixed_bfloat16 where /proc/cpuinfo reports native bfloat16 matrix
instructions (amx_bf16, avx512_bf16), float32 elsewhere; the choice is in the run log."""
import keras
import pytest

from mtl_framework.distributed import native_bf16_flags, precision_policy, resolve_precision

CPUINFO = """processor\t: {n}
vendor_id\t: GenuineIntel
model name\t: Some Xeon
flags\t\t: fpu vme sse sse2 avx avx2 avx512f {extra}
bugs\t\t: spectre_v1

"""


def cpuinfo(tmp_path, extra):
    path = tmp_path / "cpuinfo"
    path.write_text("".join(CPUINFO.format(n=n, extra=extra) for n in range(2)))
    return str(path)


@pytest.mark.parametrize("extra, flags, policy", [
    ("avx512_bf16 amx_bf16 amx_tile", ["amx_bf16", "avx512_bf16"], "mixed_bfloat16"),
    ("avx512_bf16", ["avx512_bf16"], "mixed_bfloat16"),
    ("amx_tile avx512_vnni", [], "float32"),  # a tile unit without bf16, VNNI (int8) only
])
def test_auto_follows_the_cpu_flags(tmp_path, extra, flags, policy):
    path = cpuinfo(tmp_path, extra)
    assert native_bf16_flags(path) == flags
    chosen, why = resolve_precision("auto", path)
    assert chosen == policy
    assert why.startswith("auto: ")
    assert all(flag in why for flag in flags)


def test_unreadable_cpuinfo_means_float32(tmp_path):
    assert native_bf16_flags(str(tmp_path / "absent")) == []
    assert resolve_precision("auto", str(tmp_path / "absent"))[0] == "float32"


def test_explicit_precisions_pass_through_and_bad_ones_are_refused(tmp_path):
    path = cpuinfo(tmp_path, "avx512_bf16")
    for precision in ("float32", "mixed_bfloat16", "mixed_float16"):
        assert resolve_precision(precision, path)[0] == precision
    with pytest.raises(ValueError, match="precision must be one of"):
        resolve_precision("bfloat16", path)


def test_policy_under_auto_is_this_machines_choice():
    expected = resolve_precision("auto")[0]
    before = keras.config.dtype_policy().name
    with precision_policy("auto"):
        assert keras.config.dtype_policy().name == expected
        layer = keras.layers.Dense(2)
        assert layer.dtype_policy.name == expected
    assert keras.config.dtype_policy().name == before


def test_an_auto_run_builds_at_the_machines_choice_and_logs_it(tmp_path):
    from test_distributed import write_experiment

    from mtl_framework.trainer import Run

    lines = []
    experiment = write_experiment(tmp_path, precision="auto", tasks=["tnews"], steps=1)
    run = Run(experiment, str(tmp_path / "run"), log=lines.append)
    expected, why = resolve_precision("auto")
    assert run.backbone.dtype_policy.name == expected
    assert f"precision: {expected} ({why})" in lines
    run.close()
