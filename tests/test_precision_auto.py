"""`precision: auto`: mixed_bfloat16 where /proc/cpuinfo reports native bfloat16 matrix
instructions (amx_bf16, avx512_bf16), float32 elsewhere; the choice is in the run log."""
import keras
import pytest

from mtl_framework.config.precision import native_bf16_flags, resolve_precision
from mtl_framework.step.distributed import precision_policy

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

    from mtl_framework.loop.run import Run

    lines = []
    experiment = write_experiment(tmp_path, precision="auto", tasks=["tnews"], steps=1)
    run = Run(experiment, str(tmp_path / "run"), log=lines.append)
    expected, why = resolve_precision("auto")
    assert run.backbone.dtype_policy.name == expected
    assert f"precision: {expected} ({why})" in lines
    run.close()


# --- auto as the default: settled when a run starts, kept by the run -------------------

@pytest.fixture
def bf16_cpu(tmp_path, monkeypatch):
    """No $MTL_PRECISION (the default applies) on a CPU with avx512_bf16; returns a
    function that turns it into one without."""
    from mtl_framework.config import precision

    monkeypatch.delenv("MTL_PRECISION", raising=False)
    monkeypatch.setattr(precision, "CPUINFO", cpuinfo(tmp_path, "avx512_bf16"))
    plain = tmp_path / "plain"
    plain.mkdir()
    return lambda: monkeypatch.setattr(precision, "CPUINFO", cpuinfo(plain, "avx2"))


def test_the_default_is_auto_and_mtl_precision_stands_in_for_it(monkeypatch):
    from mtl_framework.config.experiment import Experiment, ExperimentError

    minimal = {"tasks": ["tnews"], "backbone": {"size": "small"}}
    experiment = Experiment.from_dict(minimal)
    monkeypatch.delenv("MTL_PRECISION", raising=False)
    assert experiment.precision == "auto"
    monkeypatch.setenv("MTL_PRECISION", "mixed_bfloat16")
    assert experiment.precision == "mixed_bfloat16"
    assert Experiment.from_dict({**minimal, "precision": "float32"}).precision == "float32"
    monkeypatch.setenv("MTL_PRECISION", "bf16")
    with pytest.raises(ExperimentError, match=r"^MTL_PRECISION='bf16': must be one of float32, "
                                              r"mixed_bfloat16, mixed_float16, auto"):
        experiment.precision


def test_auto_is_float32_on_jax(monkeypatch, tmp_path):
    from mtl_framework.config import precision

    monkeypatch.setattr(precision, "keras_backend", lambda: "jax")
    assert resolve_precision("auto", cpuinfo(tmp_path, "avx512_bf16 amx_bf16"))[0] == "float32"


def test_a_run_records_what_auto_chose_and_keeps_it_on_another_cpu(tmp_path, bf16_cpu):
    from test_distributed import write_experiment

    from mtl_framework.config.experiment import ExperimentError
    from mtl_framework.loop.run import Run
    from mtl_framework.plan import plan_run
    from mtl_framework.rundir import RunDir
    from mtl_framework.saving.trained import open_run

    experiment = write_experiment(tmp_path, tasks=["tnews"], steps=1)  # names no precision
    run_dir, lines = str(tmp_path / "run"), []
    run = Run(experiment, run_dir, log=lines.append)
    run.train()
    run.close()
    assert "precision: mixed_bfloat16 (auto: the CPU multiplies bfloat16 natively " \
           "(avx512_bf16))" in lines
    assert run.backbone.dtype_policy.name == "mixed_bfloat16"
    assert RunDir(run_dir).read_experiment()["precision"] == "mixed_bfloat16"  # the policy, not auto
    bf16_cpu()  # the run moves to a CPU where auto means float32
    assert resolve_precision("auto")[0] == "float32"
    plan = plan_run(experiment, output=run_dir, resume=True)
    assert plan.precision == ("mixed_bfloat16", "the run's own: it trained in mixed_bfloat16 "
                                                "(experiment.yaml)")
    assert open_run(run_dir, log=None).precision == "mixed_bfloat16"
    with pytest.raises(ExperimentError, match=r"precision is 'float32', the run's is "
                                              r"'mixed_bfloat16'"):
        plan_run(write_experiment(tmp_path, tasks=["tnews"], steps=1, precision="float32"),
                 output=run_dir, resume=True)


def test_a_run_that_records_no_precision_trained_in_float32(tmp_path, bf16_cpu):
    from test_run_dir import format1_copy

    from mtl_framework.plan import plan_run
    from mtl_framework.rundir import RunDir
    from mtl_framework.saving.trained import open_run

    run = format1_copy(tmp_path)  # written before `auto` became the default: no precision
    assert resolve_precision("auto")[0] == "mixed_bfloat16"
    assert open_run(str(run), log=None).precision == "float32"
    plan = plan_run(RunDir(run).experiment_file(), output=str(run), resume=True)
    assert plan.precision[0] == "float32"
