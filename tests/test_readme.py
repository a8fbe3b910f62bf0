"""Every ```python block of README.md runs (issue 22, point 4), so none can rot. The
paths the blocks name (`runs/demo`, its exports, `experiments/demo.yaml`) are made by a
fixture in a temporary folder: a tiny run on the demo data with the demo's tasks that
the blocks predict (tnews, cluener), exported as `make demo` exports it."""
import argparse
import os
import re
import subprocess

import numpy as np
import pytest

from conftest import REPO, TINY_BACKBONE, write_tiny_experiment

BLOCKS = re.findall(r"^```python\n(.*?)^```", (REPO / "README.md").read_text(encoding="utf-8"),
                    re.S | re.M)


@pytest.fixture(scope="module")
def demo_folder(tmp_path_factory):
    from mtl_framework.loop.run import Run
    from mtl_framework.saving.writer import export

    folder = tmp_path_factory.mktemp("readme")
    (folder / "experiments").symlink_to(REPO / "experiments")
    with pytest.MonkeyPatch.context() as patch:  # the module's cache, restored after
        patch.setenv("MTL_CACHE_DIR", str(folder / "cache"))
        path = write_tiny_experiment(folder / "tiny.yaml", tasks=["tnews", "cluener"], steps=2,
                                     backbone={**TINY_BACKBONE, "alpha_warmup_steps": 0})
        Run(str(path), output=str(folder / "runs" / "demo"), log=lambda *_: None).train()
        for fmt in ("keras", "bert4keras", "roformer-pytorch"):
            export(str(folder / "runs" / "demo"), fmt,
                   str(folder / "runs" / "demo" / "export" / fmt), log=None)
        yield folder


def test_readme_has_python_blocks():
    assert len(BLOCKS) >= 2


def test_every_python_block_runs(demo_folder, monkeypatch):
    monkeypatch.chdir(demo_folder)
    namespace = {"__name__": "__main__"}
    for number, block in enumerate(BLOCKS, 1):
        exec(compile(block, f"README.md python block {number}", "exec"), namespace)
    # what the blocks claim, checked on what they computed
    hidden = np.asarray(namespace["hidden"])
    assert hidden.shape == (1, len(namespace["token_ids"]), TINY_BACKBONE["hidden_size"])
    same = namespace["same"]({"token_ids": np.array([namespace["token_ids"]]),
                              "segment_ids": np.array([namespace["segment_ids"]])})
    assert np.allclose(np.asarray(same), hidden, atol=1e-5)  # roformer-pytorch export, reloaded
    assert (demo_folder / "runs" / "demo_smoke" / "epochs.csv").read_text().startswith("epoch,")
    (spans,) = namespace["spans"]
    assert all(s["text"] == "浙商银行企业信贷部叶老桂博士"[s["start"]:s["end"]] for s in spans)
    assert len(namespace["labels"]) == 1


# ---------------------------------------------------------------- the ```bash blocks (issue 34)

SHELL_BLOCKS = re.findall(r"^```bash\n(.*?)^```", (REPO / "README.md").read_text(encoding="utf-8"),
                          re.S | re.M)
SYNOPSIS = re.compile(r"\b[A-Z][A-Z_]*\b|\[|\.\.\.")  # placeholders (TASK, DIR), [optional] parts


def shell_lines(block):
    """The commands of a block: continuation lines joined, comments and `make` left out
    (`make demo` is what the commands run after; `make test` is this suite)."""
    lines = []
    for line in block.replace("\\\n", " ").splitlines():
        line = line.split("  #")[0]
        if line.startswith(" ") and lines:  # a synopsis going on under its command
            lines[-1] += " " + line.strip()
        elif line.strip():
            lines.append(line.strip())
    return [line for line in lines if not line.startswith(("#", "make "))]


def synopsis_lines():
    return [line for block in SHELL_BLOCKS for line in shell_lines(block)
            if line.startswith("mtl ") and SYNOPSIS.search(line.replace("mtl ", "", 1))]


def runnable_lines():
    return [line for block in SHELL_BLOCKS for line in shell_lines(block)
            if line not in synopsis_lines()]


def test_every_synopsis_names_a_command_and_options_it_has():
    from mtl_framework.cli import build_parser

    def subparsers(parser):
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return actions[0].choices if actions else {}

    parser, checked = build_parser(), 0
    for line in synopsis_lines():
        words = line.split()[1:]
        command = parser
        while words and words[0] in subparsers(command):
            command = subparsers(command)[words.pop(0)]
        options = {o for a in command._actions for o in a.option_strings} | \
            {o for a in parser._actions for o in a.option_strings}
        used = set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", " ".join(words)))
        assert used <= options, (line, used - options)
        checked += 1
    assert checked >= 15


def test_every_runnable_line_is_a_command_of_mtl_or_the_shell():
    lines = runnable_lines()
    assert lines and all(re.match(r"(mtl |echo .*\| mtl )", line) for line in lines), lines


@pytest.fixture(scope="module")
def after_make_demo(tmp_path_factory):
    """What `make demo` leaves, at the tiny scale: runs/demo trained on the tasks README's
    commands use, its keras export with heads and the initial export; `../shared` beside
    it when this checkout has one."""
    from mtl_framework.loop.run import Run
    from mtl_framework.saving.writer import export
    from mtl_framework.transfer.benchmark import initial_export

    base = tmp_path_factory.mktemp("readme-shell")
    folder = base / "repo"
    folder.mkdir()
    for name in ("experiments", "suites"):
        (folder / name).symlink_to(REPO / name)
    if (REPO.parent / "shared").is_dir():
        (base / "shared").symlink_to(REPO.parent / "shared")
    os.environ["MTL_CACHE_DIR"] = str(base / "cache")  # the fixture's env is the test's
    path = write_tiny_experiment(folder / "tiny.yaml", tasks=["tnews", "cluener", "afqmc"],
                                 steps=2, tasks_per_update=3,
                                 backbone={**TINY_BACKBONE, "alpha_warmup_steps": 0})
    Run(str(path), output=str(folder / "runs" / "demo"), log=lambda *_: None).train()
    export(str(folder / "runs" / "demo"), "keras", str(folder / "runs" / "demo" / "export" / "keras"),
           with_heads=True, log=None)
    initial_export(str(folder / "runs" / "demo"), str(folder / "runs" / "demo" / "export" / "initial"),
                   log=lambda *_: None)
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("line", runnable_lines())
def test_every_readme_command_runs_as_written_after_make_demo(after_make_demo, line, monkeypatch):
    if "../shared" in line and not (after_make_demo.parent / "shared").is_dir():
        pytest.skip("needs ../shared (real data)")
    env = {**os.environ, "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", f"set -o pipefail; {line}"], cwd=after_make_demo,
                          env=env, capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, f"{line}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
