"""Every balancing method through the balancing harness (tests/balancing_harness.py), each
with its paper's formula recomputed in NumPy; the config schema; PCGrad's memory refusal.
PCGrad's projection and GradNorm's balance against the papers: test_balancing_references.py."""
import numpy as np
import pytest
from balancing_harness import SEED, TASKS, BalancingCase, make_model, run_balancing_test

from mtl_framework.mixing import balancing
from mtl_framework.mixing.balancing import BalancingError, resolve

K = len(TASKS)


def means(logs, key="loss"):
    out = {}
    for log in logs:
        out.setdefault(log["task"], []).append(log[key])
    return {t: float(np.mean(v)) for t, v in out.items()}


def mean_one(log_weights):
    w = np.exp(np.array([log_weights[t] for t in TASKS]))
    return dict(zip(TASKS, w * K / w.sum()))


def softmax(x):
    e = np.exp(np.asarray(x) - np.max(x))
    return e / e.sum()


def loss_rate(history, eta=1.0, beta=0.9):
    """λ_k ∝ exp(-η Σ d log m_k), m_k the smoothed loss; mean 1."""
    if not history:
        return None
    smoothed, log_w = {}, {t: 0.0 for t in TASKS}
    for logs in history:
        for t, loss in means(logs).items():
            new = loss if t not in smoothed else beta * smoothed[t] + (1 - beta) * loss
            if t in smoothed:
                log_w[t] -= eta * (np.log(new) - np.log(smoothed[t]))
            smoothed[t] = new
    return mean_one(log_w)


def dwa(history, temperature=2.0):
    """Window 1: λ = K softmax((L_k(u-1) / L_k(u-2)) / T) once two windows are done."""
    if len(history) < 2:
        return None if not history else {t: 1.0 for t in TASKS}
    last, before = means(history[-1]), means(history[-2])
    return dict(zip(TASKS, K * softmax([last[t] / before[t] / temperature for t in TASKS])))


def uncertainty(history, lr=0.05, s0=-0.5):
    s = {t: s0 for t in TASKS}
    for logs in history:
        for t, loss in means(logs).items():
            s[t] -= lr * (1 - loss * np.exp(-s[t])) / 2
    return {t: 0.5 * np.exp(-s[t]) for t in TASKS}


def rlw(history):
    z = np.random.default_rng([SEED, len(history)]).standard_normal(K)
    return dict(zip(TASKS, K * softmax(z)))


def gradnorm(history, alpha=1.5, lr=0.025, norm_of=lambda log: log["gradient_norm"]):
    """norm_of: ||g_k|| of a micro-batch's gradient as the update takes it (`none`: raw)."""
    if not history:
        return None
    w = {t: 1.0 for t in TASKS}
    first, last, norm = {}, {}, {}
    for logs in history:
        losses = means(logs)
        norms = means([{"task": log["task"], "norm": norm_of(log)} for log in logs], "norm")
        for t in losses:
            first.setdefault(t, losses[t])
            last[t], norm[t] = losses[t], norms[t]
        r = np.array([last[t] / first[t] for t in TASKS])
        r = r / r.mean()
        n = np.array([norm[t] for t in TASKS])
        g = np.array([w[t] for t in TASKS]) * n
        target = g.mean() * r ** alpha
        target = target * g.sum() / target.sum()
        step = lr * n / n.mean()
        new = np.maximum(np.array([w[t] for t in TASKS]) - np.clip(g / n - target / n, -step, step), 1e-3)
        w = dict(zip(TASKS, K * new / new.sum()))
    return w


CASES = {
    "none": BalancingCase("none", invariant=False),
    "gradient_norm": BalancingCase("gradient_norm", True, lambda loss, norm, first: 1 / norm),
    "loss_norm": BalancingCase("loss_norm", True, lambda loss, norm, first: 1 / loss),
    "initial_loss": BalancingCase("initial_loss", True, lambda loss, norm, first: 1 / first),
    "loss_rate": BalancingCase("loss_rate", True, lambda loss, norm, first: 1 / norm,
                               weights_oracle=loss_rate),
    "dwa": BalancingCase({"normalize": "none", "weights": "dwa", "window": 1}, False,
                         weights_oracle=dwa),
    "gradient_norm x dwa": BalancingCase({"normalize": "gradient_norm", "weights": "dwa",
                                          "window": 1}, True, lambda loss, norm, first: 1 / norm,
                                         weights_oracle=dwa),
    "uncertainty": BalancingCase("uncertainty", False, initial_weight=0.5 * np.exp(0.5),
                                 weights_oracle=lambda h: uncertainty(h)),
    "rlw": BalancingCase("rlw", False, weights_oracle=rlw),
    "gradient_norm x rlw": BalancingCase({"normalize": "gradient_norm", "weights": "rlw"}, True,
                                         lambda loss, norm, first: 1 / norm, weights_oracle=rlw),
    "gradnorm": BalancingCase("gradnorm", False, weights_oracle=gradnorm),
    # g_k/||g_k|| has norm 1: G_k = λ_k, whatever the raw norms (a x 1000 changes nothing)
    "gradient_norm x gradnorm": BalancingCase(
        {"normalize": "gradient_norm", "weights": "gradnorm"}, True, lambda loss, norm, first: 1 / norm,
        weights_oracle=lambda history: gradnorm(history, norm_of=lambda log: 1.0)),
    "pcgrad": BalancingCase("pcgrad", False, pcgrad=True),
}


def test_every_table_method_has_a_case():
    named = {c.config if isinstance(c.config, str) else c.config["weights"] for c in CASES.values()}
    assert named >= set(balancing.NAMES)


@pytest.mark.parametrize("name", list(CASES))
def test_balancing_harness(name):
    run_balancing_test(CASES[name])


def test_old_names_keep_their_meaning_and_plain_new_names_follow_libmtl():
    assert resolve("gradient_norm")[:2] == ("gradient_norm", "fixed")
    assert resolve("none")[:2] == ("none", "fixed")
    assert resolve("initial_loss")[:2] == ("initial_loss", "fixed")
    assert resolve("loss_rate")[:2] == ("gradient_norm", "loss_rate")  # the write-up's ∇
    assert resolve("dwa")[:2] == ("none", "dwa")  # LibMTL's DWA weights raw losses
    assert resolve({"weights": "dwa"})[:2] == ("gradient_norm", "dwa")


@pytest.mark.parametrize("config,message", [
    ("gradnrom", "balancing must be one of"),
    ({"normalize": "gradient_norm", "weights": "dwa", "windw": 3}, "unknown balancing key 'windw'"),
    ({"weights": "dwa", "temperature": 0}, "balancing.temperature must be a number > 0"),
    ({"weights": "pcgrad", "max_memory": "lots"}, "balancing.max_memory must be bytes"),
    ({"normalize": "dwa"}, "balancing.normalize must be one of"),
])
def test_bad_balancing_config_is_one_line(config, message):
    with pytest.raises(BalancingError, match=message) as error:
        resolve(config)
    assert "\n" not in str(error.value)


def test_pcgrad_over_its_memory_budget_is_refused_before_any_allocation():
    with pytest.raises(BalancingError, match=r"pcgrad needs .* MiB for 2 task gradient "
                                             r"accumulators .* over max_memory") as error:
        make_model({"normalize": "none", "weights": "pcgrad", "max_memory": 1000})
    assert "\n" not in str(error.value)


def test_mtl_train_refuses_pcgrad_over_budget_in_one_line_exit_2(tmp_path, capsys):
    """In this process (cli.main, as tests/test_faults.py runs refusals): a subprocess
    cost a TensorFlow start-up for the same line and exit status."""
    from mtl_framework import cli

    from conftest import write_tiny_experiment

    experiment = write_tiny_experiment(
        tmp_path / "e.yaml", balancing={"normalize": "none", "weights": "pcgrad", "max_memory": "1KiB"})
    run_dir = tmp_path / "run"
    assert cli.main(["train", str(experiment), "--output", str(run_dir)]) == 2
    err = capsys.readouterr().err
    # the last line (the vocab's progress lines may come first)
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"error: {experiment}:1: pcgrad needs ") and "over max_memory (0.0 MiB)" in line
    assert [x for x in err.splitlines() if x.startswith("error:")] == [line]
    assert "Traceback" not in err
    assert not run_dir.exists()


def test_experiment_check_names_the_balancing_line(tmp_path):
    from mtl_framework.config.experiment import ExperimentError, load_experiment

    path = tmp_path / "e.yaml"
    path.write_text("tasks: [tnews]\nsteps: 3\nbalancing:\n  normalize: gradient_norm\n"
                    "  weights: dwa\n  windw: 5\n")
    with pytest.raises(ExperimentError) as error:
        load_experiment(str(path))
    assert str(error.value).splitlines()[0] == (
        f"{path}:6: unknown balancing key 'windw' for gradient_norm x dwa; "
        "known: normalize, weights, temperature, window")
    path.write_text("tasks: [tnews]\nbackbone: {size: small}\nbalancing: {weights: dwa, window: 5}\n")
    assert load_experiment(str(path)).balancing == {"weights": "dwa", "window": 5}


def test_docs_show_the_table_as_the_code_has_it():
    from conftest import REPO

    text = (REPO / "docs" / "balancing.md").read_text(encoding="utf-8")
    shown = text.split("<!-- balancing.markdown_table -->\n", 1)[1].split("\n<!-- end -->", 1)[0]
    assert shown == balancing.markdown_table()
