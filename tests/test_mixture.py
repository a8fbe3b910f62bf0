"""The Mixture as a training run drives it: (task, batch) draws that a checkpointed
state repeats exactly, in the state layout old runs hold (tests/fixtures/run_format1)."""
import json
from pathlib import Path

import numpy as np
import pytest

from mtl_framework.families import make_featurizer
from mtl_framework.mixing.mixture import Mixture, RoundRobin, TaskSampler, TaskStream, example_count
from mtl_framework.tokenizer import Tokenizer, build_vocab, count_units, write_vocab

CHARS = "我爱北京天安门上太阳升伟大领袖毛主席指引我们向前进今天气很好明后会下雨吗是的不他她它在家里"
OLD_RUN = Path(__file__).parent / "fixtures" / "run_format1"


@pytest.fixture
def texts_features(tmp_path):
    """Four small mlm feature sets (mlm: batches carry seeded masks, the hardest to repeat)."""
    vocab = tmp_path / "vocab.txt"
    write_vocab(build_vocab(count_units([CHARS])), vocab)
    tokenizer = Tokenizer(str(vocab))
    rng = np.random.default_rng(0)
    out = []
    for i, rows in enumerate((37, 52, 21, 18)):
        texts = ["".join(rng.choice(list(CHARS), rng.integers(2, 40))) for _ in range(rows)]
        folder = tmp_path / f"f{i}"
        folder.mkdir()
        out.append(make_featurizer("mlm", tokenizer, 48, task=f"t{i}").featurize(texts, folder))
    return out


def mixture(features, seed=7):
    """Two tasks and an mlm round robin over two texts, seeded as loop.run.Run seeds them."""
    streams = {"a": TaskStream(features[0], 4, seed=seed), "b": TaskStream(features[1], 4, seed=seed + 1),
               "mlm": RoundRobin([TaskStream(f, 4, seed=seed + 1000 + i)
                                  for i, f in enumerate(features[2:])])}
    return Mixture(streams, TaskSampler([0.5, 0.3, 0.2], seed=seed))


def draws(mix, n):
    return [mix.next() for _ in range(n)]


def same(x, y):
    (task_x, batch_x), (task_y, batch_y) = x, y
    return task_x == task_y and batch_x.keys() == batch_y.keys() and \
        all(np.array_equal(batch_x[k], batch_y[k]) for k in batch_x)


def test_restored_mixture_repeats_tasks_and_batches_exactly(texts_features):
    mix = mixture(texts_features)
    first = draws(mix, 40)  # past an epoch of every stream (mlm turns included)
    state = json.loads(json.dumps(mix.state()))  # as trainer.json keeps it
    expected = draws(mix, 30)
    resumed = mixture(texts_features)
    resumed.restore(state)
    assert all(same(x, y) for x, y in zip(expected, draws(resumed, 30)))
    # the tasks follow the sampler alone, and each task got its own stream's batches
    tasks = [task for task, _ in first + expected]
    replay = TaskSampler([0.5, 0.3, 0.2], seed=7).sample(70)
    assert tasks == [["a", "b", "mlm"][i] for i in replay]


def test_round_robin_takes_each_text_in_turn(texts_features):
    streams = [TaskStream(f, 4, seed=i) for i, f in enumerate(texts_features[2:])]
    twins = [TaskStream(f, 4, seed=i) for i, f in enumerate(texts_features[2:])]
    robin = RoundRobin(streams)
    got = [robin.next_batch() for _ in range(6)]
    want = [twins[i % 2].next_batch() for i in range(6)]
    assert all(np.array_equal(g["token_ids"], w["token_ids"]) for g, w in zip(got, want))
    assert robin.state()["turn"] == 6 and [s["index"] for s in robin.state()["streams"]] == [3, 3]


def test_state_layout_is_the_one_old_checkpoints_hold(texts_features):
    old = json.loads((OLD_RUN / "checkpoints" / "step-00000002" / "trainer.json").read_text())
    old = old["mixture"]
    mix = mixture(texts_features)
    mix.next()
    new = mix.state()
    assert new.keys() == old.keys() == {"sampler", "streams"}
    assert new["sampler"].keys() == old["sampler"].keys()
    assert new["streams"]["a"].keys() == old["streams"]["tnews"].keys()
    assert new["streams"]["mlm"].keys() == old["streams"]["mlm"].keys()
    assert new["streams"]["mlm"]["streams"][0].keys() == old["streams"]["mlm"]["streams"][0].keys()


def test_a_state_of_other_tasks_is_refused(texts_features):
    state = mixture(texts_features).state()
    state["streams"]["c"] = state["streams"].pop("b")
    with pytest.raises(ValueError, match=r"saved mixture has tasks \['a', 'c', 'mlm'\], "
                                         r"this one \['a', 'b', 'mlm'\]"):
        mixture(texts_features).restore(state)
    state = mixture(texts_features).state()
    state["streams"]["mlm"]["streams"].pop()
    with pytest.raises(ValueError, match="saved round robin had 1 text streams, this one 2"):
        mixture(texts_features).restore(state)


def test_example_count_counts_examples_kept_not_rows(tmp_path):
    """A long text makes several mlm rows and a blank one none: the rates' size is the
    three texts that made it in."""
    vocab = tmp_path / "vocab.txt"
    write_vocab(build_vocab(count_units([CHARS])), vocab)
    featurizer = make_featurizer("mlm", Tokenizer(str(vocab)), 16, task="t")
    features = featurizer.featurize([CHARS * 3, "", "  ", "我爱", CHARS], tmp_path)
    assert len(features) > 5 and example_count(features) == 3
