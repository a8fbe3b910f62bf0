"""Every ```python block of README.md runs (issue 22, point 4), so none can rot. The
paths the blocks name (`runs/demo`, its exports, `experiments/demo.yaml`) are made by a
fixture in a temporary folder: a tiny run on the demo data with the demo's tasks that
the blocks predict (tnews, cluener), exported as `make demo` exports it."""
import os
import re

import numpy as np
import pytest

from conftest import REPO, TINY_BACKBONE, write_tiny_experiment

BLOCKS = re.findall(r"^```python\n(.*?)^```", (REPO / "README.md").read_text(encoding="utf-8"),
                    re.S | re.M)


@pytest.fixture(scope="module")
def demo_folder(tmp_path_factory):
    from mtl_framework.export import export
    from mtl_framework.trainer import Run

    folder = tmp_path_factory.mktemp("readme")
    (folder / "experiments").symlink_to(REPO / "experiments")
    previous = os.environ.get("MTL_CACHE_DIR")
    os.environ["MTL_CACHE_DIR"] = str(folder / "cache")
    try:
        path = write_tiny_experiment(folder / "tiny.yaml", tasks=["tnews", "cluener"], steps=2,
                                     backbone={**TINY_BACKBONE, "alpha_warmup_steps": 0})
        Run(str(path), output=str(folder / "runs" / "demo"), log=lambda *_: None).train()
        for fmt in ("keras", "bert4keras", "roformer-pytorch"):
            export(str(folder / "runs" / "demo"), fmt,
                   str(folder / "runs" / "demo" / "export" / fmt), log=None)
        yield folder
    finally:
        if previous is None:
            os.environ.pop("MTL_CACHE_DIR")
        else:
            os.environ["MTL_CACHE_DIR"] = previous


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
