"""bench/results holds one current result per benchmark, and every citation of one resolves.

Docs and comments cite a current result by its path (`bench/results/backbone.md`) and a
superseded run as history in git (`git show 41d839a:bench/results/backbone.md`); a re-run
of a benchmark replaces its file (issue 41).
"""
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"

# Each benchmark script in bench/ and the one results file its default output writes; its
# .md (and any plot) sit beside it under the same name.
RESULT_OF = {
    "architectures.py": "architectures.json",
    "attention_cost.py": "attention_cost.json",
    "backbone.py": "backbone.json",
    "backbone_profile.py": "backbone_profile.json",
    "balancing.py": "balancing.json",
    "cache_key.py": "cache_key.json",
    "embedding_gain.py": "embedding_gain.json",
    "contrastive_cost.py": "contrastive_cost.json",
    "contrastive_lr.py": "contrastive_lr.json",
    "contrastive_memory.py": "contrastive_memory.json",
    "embedding_speed.py": "embedding_speed.json",
    "exact_padding.py": "exact_padding.json",
    "gpu.py": "gpu.json",
    "init_vs_bert4keras.py": "init_vs_bert4keras.json",
    "jax_packing.py": "jax_packing.json",
    "learning.py": "learning.json",
    "long_context.py": "long_context.json",
    "main_job.py": "main_job.json",
    "mtl_overhead.py": "mtl_overhead.json",
    "packed_step.py": "packed_step.json",
    "pipeline.py": "pipeline.json",
    "precision.py": "precision.json",
    "prepare.py": "prepare.json",
    "pretraining_value.py": "pretraining_value.json",
    "read_rows.py": "read_rows.json",
    "real_tokens.py": "real_tokens.json",
    "speed_ab.py": "speed_ab.json",
    "st_trainer_speed.py": "st_trainer_speed.json",
    "train_loop.py": "train_loop.json",
    "transfer.py": "transfer/results.json",
}
# bench/results/mixed_value*: another study's folder, kept by its own author.
NOT_OURS = "mixed_value"

CURRENT = re.compile(r"(?<![\w:/.-])bench/results/[\w./{},*-]*")
HISTORY = re.compile(r"git show ([0-9a-f]{7,40}):(bench/results/[\w./-]+\w)")


def cited_texts():
    files = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")),
             *sorted((REPO / "bench").glob("*.py")), *sorted((REPO / "mtl_framework").rglob("*.py"))]
    return {f.relative_to(REPO): f.read_text(encoding="utf-8") for f in files}


def expand(citation):
    """`bench/results/x.{json,md}` -> both paths; trailing punctuation dropped."""
    citation = citation.rstrip(".,")
    braces = re.search(r"\{([^}]*)\}", citation)
    if not braces:
        return [citation]
    return [citation[:braces.start()] + choice + citation[braces.end():]
            for choice in braces.group(1).split(",")]


# A study that writes its rows as they come (issue 42's, bench/mixed_value.py): its folder
# exists from its first row on; until then its own scripts and the README may name it.
RUNNING = ("bench/results/mixed_value/",)


def test_every_cited_result_exists():
    missing = []
    for name, text in cited_texts().items():
        for citation in CURRENT.findall(text):
            for path in expand(citation):
                if not any(REPO.glob(path)) and not path.startswith(RUNNING):
                    missing.append(f"{name}: {path}")
    assert not missing, "cited, not in the tree (cite a superseded run as `git show SHA:PATH`):\n" \
        + "\n".join(missing)


def test_citations_are_found():
    """The scan sees the forms the docs use (a broken pattern would find nothing to check)."""
    text = cited_texts()[Path("docs/benchmarks.md")]
    assert "bench/results/backbone.json" in CURRENT.findall(text)
    assert ("41d839a", "bench/results/backbone.md") in HISTORY.findall(text)
    assert expand("bench/results/long_context.{json,md}.") == [
        "bench/results/long_context.json", "bench/results/long_context.md"]


def test_history_citations_are_in_git():
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=REPO,
                             capture_output=True, text=True).stdout.strip()
    if shallow == "true":
        pytest.skip("shallow clone: old commits are absent")
    cited = {(name, sha, path) for name, text in cited_texts().items()
             for sha, path in HISTORY.findall(text)}
    assert cited
    missing = [f"{name}: {sha}:{path}" for name, sha, path in sorted(cited)
               if subprocess.run(["git", "cat-file", "-e", f"{sha}:{path}"], cwd=REPO,
                                 capture_output=True).returncode != 0]
    assert not missing, "history citations git cannot show:\n" + "\n".join(missing)


def test_one_result_per_benchmark():
    for script, result in RESULT_OF.items():
        assert (REPO / "bench" / script).is_file(), script
        assert (RESULTS / result).is_file(), f"{script}'s result {result}"
    names = {result.split("/")[0].split(".")[0] for result in RESULT_OF.values()}
    strays = [entry.name for entry in RESULTS.iterdir()
              if not entry.name.startswith(NOT_OURS) and entry.name.split(".")[0] not in names]
    assert not strays, "not the current result of a benchmark in RESULT_OF (older runs " \
        f"belong in git history): {sorted(strays)}"
    jsons = [p.name for p in RESULTS.glob("*.json")]
    assert sorted(jsons) == sorted(r for r in RESULT_OF.values() if "/" not in r)


def test_a_study_rerun_replaces_its_entry_and_keeps_the_others(tmp_path):
    from bench.studies import read_study, write_study

    def markdown(result):
        return f"# one study\n\nscore {result['score']}\n"

    path = tmp_path / "precision.json"
    write_study(path, "bench/precision.py", "Title", "tnews600", {"score": 1}, markdown)
    write_study(path, "bench/precision.py", "Title", "mixture600", {"score": 2}, markdown)
    write_study(path, "bench/precision.py", "Title", "tnews600", {"score": 3}, markdown)
    assert read_study(path, "tnews600") == {"score": 3}
    assert read_study(path, "mixture600") == {"score": 2}
    assert read_study(path, "cluener600") is None
    assert path.with_suffix(".md").read_text() == (
        "# Title\n\n## tnews600\n\nscore 3\n\n## mixture600\n\nscore 2\n")
    older = tmp_path / "older.json"  # written before studies: the whole file is the one result
    older.write_text('{"runs": [1]}')
    assert read_study(older, "anything") == {"runs": [1]}
    assert read_study(tmp_path / "absent.json", "tnews600") is None
