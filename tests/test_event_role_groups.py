"""Event tasks get their role groups in a real run (issue: Run.build passed only
`multi_label`, so DuEE arguments were grouped across all event types)."""
import json

import numpy as np

from mtl_framework.loop.run import Run

SPEC = """
dataset: tiny_events
format: event_json
files: {train: events/train.json, dev: events/train.json}
tasks:
  - name: tiny_events
    type: extraction_event
    labels: ["收购:trigger", "收购:买方", "裁员:trigger", "裁员:公司"]
    max_length: 32
    metric: event_f1
"""

ROWS = [
    {"id": "1", "text": "甲公司收购乙，丙公司裁员", "event_list": [
        {"event_type": "收购", "trigger": "收购", "trigger_start_index": 3,
         "arguments": [{"role": "买方", "argument": "甲公司", "argument_start_index": 0}]},
        {"event_type": "裁员", "trigger": "裁员", "trigger_start_index": 10,
         "arguments": [{"role": "公司", "argument": "丙公司", "argument_start_index": 7}]}]},
    {"id": "2", "text": "丁公司收购戊", "event_list": [
        {"event_type": "收购", "trigger": "收购", "trigger_start_index": 3,
         "arguments": [{"role": "买方", "argument": "丁公司", "argument_start_index": 0}]}]},
]

EXPERIMENT = """
data_root: {root}
cache_dir: {root}/cache
task_specs: [{root}/specs]
backbone: {{num_layers: 1, hidden_size: 32, num_heads: 2, intermediate_size: 64, vocab_size: 200}}
tasks: [tiny_events]
batch_size: 2
tasks_per_update: 1
max_length: 32
steps: 1
"""


def test_run_builds_event_head_with_role_groups(tmp_path):
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "tiny_events.yaml").write_text(SPEC, encoding="utf-8")
    (tmp_path / "events").mkdir()
    (tmp_path / "events" / "train.json").write_text(
        "\n".join(json.dumps(r, ensure_ascii=False) for r in ROWS), encoding="utf-8")
    experiment = tmp_path / "experiment.yaml"
    experiment.write_text(EXPERIMENT.format(root=tmp_path))
    run = Run(str(experiment), output=str(tmp_path / "run"), log=lambda *_: None)
    head = run.model.heads["tiny_events"]
    assert head.role_groups == ["收购", "收购", "裁员", "裁员"]
    # Four arguments, every pair linked: one event per type, never one mixed event.
    arguments = {(0, 4, 5), (1, 1, 3), (2, 11, 12), (3, 8, 10)}
    linked = np.ones((16, 16))
    assert sorted(head.events(arguments, linked, linked)) == [
        ((0, 4, 5), (1, 1, 3)), ((2, 11, 12), (3, 8, 10))]
