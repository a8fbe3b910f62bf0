"""One results file per benchmark, holding each of its studies (configurations) side by side.

A benchmark run in several configurations (bench/precision.py: TNEWS alone, the mixture;
bench/init_vs_bert4keras.py: 300 and 600 updates) keeps them all in its one results file
(bench/results/precision.json) under "studies", keyed by the study's name, and the .md beside
it with one section per study. A re-run of a study replaces its entry and leaves the others
as they were; older results are in git.
"""
import json


def read_study(path, study):
    """The study's result in the results file at `path`, or None. A file written before
    studies (one result at the top level) reads as that result, whatever `study` is."""
    if not path.exists():
        return None
    written = json.loads(path.read_text(encoding="utf-8"))
    if "studies" not in written:
        return written
    return written["studies"].get(study)


def write_study(path, benchmark, title, study, result, markdown):
    """Put `result` under `study` in the results file at `path` (its .md beside it), keeping
    the file's other studies. `markdown(result)` renders one study: a '# ' title line, then
    its body; the .md gets `title`, then each study's body under '## <study>'."""
    studies = {}
    if path.exists():
        studies = json.loads(path.read_text(encoding="utf-8")).get("studies", {})
    studies[study] = result
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"benchmark": benchmark, "studies": studies}, indent=1,
                               ensure_ascii=False) + "\n", encoding="utf-8")
    sections = [f"# {title}", ""]
    for name, entry in studies.items():
        body = markdown(entry).split("\n", 1)[1].lstrip("\n")  # drop the study's own title
        sections += [f"## {name}", "", body.rstrip("\n"), ""]
    path.with_suffix(".md").write_text("\n".join(sections), encoding="utf-8")
