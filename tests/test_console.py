"""The console of `mtl train` (issue 34): `evaluation 1/2 (updates 1-2)` instead of Keras's
`Epoch 1/2`, one cache summary line (MLM caches labelled) instead of one line per cache and
evaluation, plain lines without control bytes when the output is not a terminal, and on a
terminal a progress bar whose line ends before the evaluation prints."""
import io
import re
import types

from mtl_framework.console import PlainBar, progress_bar
from mtl_framework.loop.callbacks import Progress

from conftest import write_tiny_experiment

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # any control byte but \t and \n


def test_a_tiny_run_logged_to_a_file_reads_as_plain_lines(tmp_path, capfd):
    from mtl_framework.loop.run import Run

    path = write_tiny_experiment(tmp_path / "tiny.yaml", tasks=["tnews", "afqmc", "mlm"],
                                 backbone={"num_layers": 1, "hidden_size": 32, "num_heads": 2,
                                           "intermediate_size": 64, "vocab_size": 1500},
                                 steps=4, eval_every=2, eval_batches=1, tasks_per_update=3)
    Run(str(path), output=str(tmp_path / "run")).train()
    out, err = capfd.readouterr()
    assert not CONTROL.search(out) and not CONTROL.search(err), (out, err)
    lines = out.splitlines()
    assert "Epoch" not in out
    assert [line for line in lines if line.startswith("evaluation ")] == [
        "evaluation 1/2 (updates 1-2)", "evaluation 2/2 (updates 3-4)"]
    assert [line.split(":")[0] for line in lines if line.startswith("update ")] == \
        ["update 2/4", "update 4/4"]
    [train_cache] = [line for line in lines if line.startswith("train features from cache")]
    assert train_cache.endswith(": tnews, afqmc; mlm: tnews, afqmc")
    [dev_cache] = [line for line in lines if line.startswith("dev features from cache")]
    assert dev_cache.endswith(": tnews, afqmc")
    assert "features from cache" not in out.replace(train_cache, "").replace(dev_cache, "")
    # the features stage of the cold cache: one closing line, no bar
    assert re.search(r"^features: [\d,]+ examples in [\d.]+ s", err, re.M), err


def test_on_a_terminal_the_bar_line_ends_before_the_evaluation_writes(capsys):
    experiment = types.SimpleNamespace(eval_every=3, steps=5)
    heads = {"tnews": types.SimpleNamespace(signs=()),  # a contrastive task's bar shows its own loss
             "pairs": types.SimpleNamespace(signs=("accuracy", "chance", "cosine"))}
    model = types.SimpleNamespace(heads=heads, last_micro_logs=[
        {"task": "tnews", "finite": True, "loss": 2.0},
        {"task": "pairs", "finite": True, "loss": 3.0, "accuracy": 0.25, "chance": 4.8, "cosine": 0.5}])
    run = types.SimpleNamespace(experiment=experiment, step=0, model=model)
    progress = Progress(run, interactive=True)
    progress.set_params({"verbose": 1, "epochs": 2, "steps": 3})
    for epoch, updates in ((0, 3), (1, 2)):
        progress.on_epoch_begin(epoch)
        for batch in range(updates):
            progress.on_train_batch_end(batch, {"loss": 1.5, "loss/tnews": 2.0})
            run.step += 1
        print("EVALUATION TABLE")
        progress.on_epoch_end(epoch)
    out = capsys.readouterr().out
    assert "\nevaluation 1/2 (updates 1-3)\n" in "\n" + out
    assert "evaluation 2/2 (updates 4-5)" in out
    assert "\nEVALUATION TABLE\n" in out and out.count("EVALUATION TABLE") == 2
    assert "loss: 1.5000" in out and "loss/tnews" not in out
    assert "loss/pairs: 3.0000" in out and "accuracy/pairs: 0.2500" in out


def test_plain_bar_writes_one_closing_line_and_a_line_a_minute(monkeypatch):
    clock = iter([0.0, 30.0, 61.0, 62.0, 70.0])
    monkeypatch.setattr("mtl_framework.console.time.monotonic", lambda: next(clock))
    stream = io.StringIO()
    with progress_bar("features", 2200, stream=stream) as bar:
        assert isinstance(bar, PlainBar)
        bar.update(1000)  # 30 s: nothing yet
        bar.set_postfix_str("tnews train")
        bar.update(1000)  # 61 s: a line
        bar.update(200)
    assert stream.getvalue().splitlines() == [
        "features: 2,000/2,200 examples (tnews train), 61 s",
        "features: 2,200 examples in 70.0 s (31/s)"]
