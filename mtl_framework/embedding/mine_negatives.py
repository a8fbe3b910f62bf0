"""Hard negatives mined with the current encoder, as FlagEmbedding's hn_mine does.

    mine_negatives(encoder, pairs, corpus, ranks=(10, 100), count=7, seed=0) -> records

Each query is searched over the corpus (cosine of its query-side vector against the
passages' passage-side vectors); of the passages ranked `ranks[0]` to `ranks[1] - 1`
(from 0), its own positives and the query itself left out (hn_mine skips it too: a
corpus holding the queries ranks each first), `count` are drawn at random (seeded): close enough
to teach, far enough down the list not to be unlabelled positives (FlagEmbedding's
range_for_sampling, 10-210 in its examples). The records are FlagEmbedding's training
lines, {"query", "pos": [...], "neg": [...]}, which the `pairs` format reads as they are.
"""
import numpy as np

from mtl_framework.numbers import l2_normalize

QUERIES_PER_BLOCK = 256  # queries scored against the corpus at once


def mine_negatives(encoder, pairs, corpus=None, ranks=(10, 100), count=7, seed=0,
                   batch_size=32, progress=None, task=None):
    """pairs: [(query, positive)] (a query may come several times, one per positive).
    corpus: passages to draw from (default: the pairs' distinct positives). task: whose
    prefixes the encoder puts on queries and passages (None: its only ones). Returns one
    record per distinct query, in first-seen order."""
    low, high = ranks
    if not 0 <= low < high:
        raise ValueError(f"ranks {low}-{high}: give FIRST < LAST, FIRST >= 0 (e.g. 10-100)")
    positives = {}
    for query, positive in pairs:
        positives.setdefault(query, []).append(positive)
    passages = list(dict.fromkeys(corpus if corpus is not None else
                                  (p for group in positives.values() for p in group)))
    index = {p: i for i, p in enumerate(passages)}
    queries = list(positives)
    query_vectors = encoder.encode(queries, side="query", task=task, batch_size=batch_size,
                                   progress=progress)
    passage_vectors = encoder.encode(passages, side="passage", task=task, batch_size=batch_size,
                                     progress=progress)
    query_vectors = l2_normalize(np.asarray(query_vectors, np.float64))  # cosine, whatever
    passage_vectors = l2_normalize(np.asarray(passage_vectors, np.float64))  # the model gives
    rng = np.random.default_rng(seed)
    depth = min(high + 1 + max(len(g) for g in positives.values()), len(passages))
    records = []
    for start in range(0, len(queries), QUERIES_PER_BLOCK):
        block = queries[start:start + QUERIES_PER_BLOCK]
        scores = query_vectors[start:start + len(block)] @ passage_vectors.T
        top = np.argsort(-scores, axis=1, kind="stable")[:, :depth]
        for query, ranked in zip(block, top):
            own = {index[p] for p in positives[query] + [query] if p in index}
            candidates = [int(i) for i in ranked if int(i) not in own][low:high]
            chosen = rng.choice(len(candidates), min(count, len(candidates)), replace=False) \
                if candidates else []
            records.append({"query": query, "pos": positives[query],
                            "neg": [passages[candidates[i]] for i in sorted(chosen)]})
    return records
