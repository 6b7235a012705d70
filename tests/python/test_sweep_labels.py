"""Grid labels have one spelling: a mapping label that YAML reads as a boolean or null (`off`,
`yes`, `~`) is 'false', 'true', 'none', as the same values in a list are labelled; it was
'False', 'True', 'None' (str of the parsed key)."""
from __future__ import annotations

import textwrap

from aimcemu import sweeps
from hostile import tiny_files


def test_yaml_booleans_and_null_as_mapping_labels_are_spelled_as_list_values(tmp_path):
    model, data = tiny_files(tmp_path)
    path = tmp_path / "sweep.yaml"
    path.write_text(textwrap.dedent(f"""\
        output: {tmp_path / 'sweep'}
        model: {model}
        data: {data}
        grid:
          noise: {{off: null, pcm: {{model: pcm_like}}}}
          mapping: {{~: null, yes: all}}
          drift_compensation: [none, global]
        """))
    plan = sweeps.plan(sweeps.load_config(path))
    assert plan.axes == {"noise": ["false", "pcm"], "mapping": ["none", "true"],
                         "drift_compensation": ["none", "global"]}
    assert plan.tasks[0].point == {"noise": "false", "mapping": "none", "drift_compensation": "none"}
    assert [sweeps._label(value) for value in (False, True, None)] == ["false", "true", "none"]
