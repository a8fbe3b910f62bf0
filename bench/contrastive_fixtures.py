"""Writes tests/fixtures/contrastive/sentence_transformers.json: sentence-transformers' own
loss figures on fixed embeddings, which tests/test_contrastive.py holds ours to.

Runs ONLY where sentence-transformers and torch are installed (not dependencies of this
repository), e.g. the torch interop venv:

    /work/main/.venv-torch/bin/python bench/contrastive_fixtures.py

No model and no hub: the "model" each loss is given returns the fixed embeddings of its
input as `sentence_embedding` (what a SentenceTransformer's forward returns), so the
figures are the losses' computation alone. The fixture holds the embeddings (float32
values), the scores, each figure, the versions, and the loss files whose computation
mtl_framework/losses.py and families/contrastive_heads.py mirror (with their sha256).
"""
import hashlib
import json
import platform
import sys
from importlib.metadata import version
from pathlib import Path

import numpy as np
import sentence_transformers
import torch
from sentence_transformers.losses import CoSENTLoss, MatryoshkaLoss, MultipleNegativesRankingLoss

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "contrastive" / \
    "sentence_transformers.json"
SITE = Path(sentence_transformers.__file__).resolve().parent
REPOSITORY = "UKPLab/sentence-transformers"
ROWS, DIM = 6, 8
MATRYOSHKA_DIMS = [8, 4, 2]


class FixedEmbeddings(torch.nn.Module):
    """A SentenceTransformer's forward, minus the model: a feature dict holding the
    embeddings under "embedding" -> {"sentence_embedding": them}."""

    def forward(self, features):
        return {"sentence_embedding": features["embedding"]}


def columns(*arrays):
    return [{"embedding": torch.tensor(a, dtype=torch.float32)} for a in arrays]


def figure(loss, features, labels=None):
    with torch.no_grad():
        return float(loss(features, labels))


def mirrored(path):
    text = (SITE / path).read_bytes()
    return {"repository": REPOSITORY, "path": f"sentence_transformers/{path}",
            "release": sentence_transformers.__version__, "sha256": hashlib.sha256(text).hexdigest()}


def main():
    rng = np.random.default_rng(43)
    anchors, positives, negatives = (rng.normal(size=(ROWS, DIM)).astype(np.float32) for _ in range(3))
    # positives near their anchors, so the losses are not all at log(candidates)
    positives = (anchors + 0.8 * positives).astype(np.float32)
    # graded scores with a tie (a tie is no pair of CoSENT's)
    scores = np.array([0.0, 1.0, 2.5, 2.5, 4.0, 5.0], np.float32)
    model = FixedEmbeddings()
    mnrl = MultipleNegativesRankingLoss(model)  # scale 20, cos_sim: the defaults
    cosent = CoSENTLoss(model)  # scale 20, pairwise_cos_sim: the defaults
    matryoshka = MatryoshkaLoss(model, MultipleNegativesRankingLoss(model), MATRYOSHKA_DIMS)
    figures = {
        "mnrl_pairs": figure(mnrl, columns(anchors, positives)),
        "mnrl_triplets": figure(mnrl, columns(anchors, positives, negatives)),
        "cosent": figure(cosent, columns(anchors, positives), torch.tensor(scores)),
        "matryoshka_mnrl_triplets": figure(matryoshka, columns(anchors, positives, negatives)),
    }
    fixture = {
        "note": ("losses of sentence-transformers on fixed embeddings: mnrl_* is "
                 "MultipleNegativesRankingLoss() on (anchor, positive[, negative]) columns, "
                 "cosent is CoSENTLoss() on (anchor, positive) with `scores` as labels, "
                 "matryoshka_mnrl_triplets is MatryoshkaLoss(MultipleNegativesRankingLoss(), "
                 "matryoshka_dims) with weights 1 (their sum over the dims)"),
        "library": "sentence-transformers",
        "versions": {"sentence-transformers": sentence_transformers.__version__,
                     "torch": torch.__version__, "numpy": version("numpy")},
        "python": platform.python_version(),
        "mirrors": [mirrored("losses/MultipleNegativesRankingLoss.py"), mirrored("losses/CoSENTLoss.py"),
                    mirrored("losses/MatryoshkaLoss.py")],
        "settings": {"scale": mnrl.scale, "similarity": "cos_sim", "matryoshka_dims": MATRYOSHKA_DIMS},
        "anchors": anchors.tolist(), "positives": positives.tolist(), "negatives": negatives.tolist(),
        "scores": scores.tolist(),
        "figures": figures,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(fixture, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {OUT}: {figures}", file=sys.stderr)


if __name__ == "__main__":
    main()
