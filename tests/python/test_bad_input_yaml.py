"""Bad YAML anywhere the tool reads it: run configs, mapping files, sweep configs, --noise.

The loader (aimcemu.yamlfile.load_yaml) bounds size, depth, aliases and the size after
alias expansion, refuses duplicate keys and invalid UTF-8, and never reads a file that is not
a regular file.  Each case asserts exit code 2, the file and field in the message, and no
change in the folder; the alias bomb and the deep document also assert that they are refused
quickly and without memory growth.
"""
from __future__ import annotations

import os
import resource
import time

import pytest

from aimcemu import FormatError
from aimcemu.yamlfile import parse_yaml
from hostile import assert_refused, tiny_files

# A "billion laughs" document: 9 levels of 10 aliases each expand to 10^9 values.
ALIAS_BOMB = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * 10)}]\n" for k in range(1, 9))


@pytest.fixture
def folder(tmp_path):
    study = tmp_path / "study"
    tiny_files(study)
    return study


def refused(argv, folder, capsys, *expected) -> float:
    """assert_refused, returning how long the command took."""
    start = time.perf_counter()
    assert_refused(argv, folder, capsys, *expected)
    return time.perf_counter() - start

def max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


BAD_DOCUMENTS = [
    ("alias_bomb", lambda: ALIAS_BOMB + "model: model.h5\n", "field '<yaml>': more than 100000 values once aliases"),
    ("deep_lists", lambda: "model: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper than 64 levels"),
    ("deep_maps", lambda: "noise: " + "{a: " * 100_000 + "1" + "}" * 100_000 + "\n", "nested deeper than 64 levels"),
    ("duplicate_key", lambda: "model: model.h5\nchips: 2\nchips: 3\n", "field 'chips': given twice in one mapping (lines 2 and 3)"),
    ("not_utf8", lambda: b"model: model.h5\nlayers: co\xffnv\n", "field '<encoding>': not valid UTF-8: byte 0xff at line 2, column 11"),
    ("too_large", lambda: "model: model.h5\n" + "# padding\n" * 120_000, "field '<file>': larger than 1024 KiB"),
    ("root_is_a_list", lambda: "- model.h5\n", "field '<root>': expected a mapping"),
    ("self_reference", lambda: "noise: &n [*n]\n", "field '<yaml>'"),
    ("non_string_key", lambda: "model: model.h5\n1: 2\n", "field '1'"),
    ("chips_nested_list", lambda: "model: model.h5\nmapping: all\nchips: [[1]]\n", "field 'chips': must be an integer"),
]


@pytest.mark.parametrize("name, document, message", BAD_DOCUMENTS, ids=[n for n, _, _ in BAD_DOCUMENTS])
def test_bad_run_configs(folder, capsys, monkeypatch, name, document, message):
    config = folder / "study.yaml"
    content = document()
    config.write_bytes(content if isinstance(content, bytes) else content.encode())
    monkeypatch.chdir(folder)
    before = max_rss_mb()
    seconds = refused(["run", "--config", config, "-o", folder / "out.h5"], folder, capsys, "study.yaml", message)
    assert seconds < 20 and max_rss_mb() - before < 200, (seconds, max_rss_mb() - before)


def test_the_alias_bomb_under_a_key_the_tool_reads_is_refused_before_expansion(folder, capsys):
    config = folder / "bomb.yaml"
    config.write_text(ALIAS_BOMB + "model: model.h5\nnoise: {model: pcm_like, extra: *a8}\n")
    before = max_rss_mb()
    seconds = refused(["run", "--config", config, "-o", folder / "out.h5"], folder, capsys,
                      "bomb.yaml: field '<yaml>': more than")
    assert seconds < 20 and max_rss_mb() - before < 200


def test_mapping_files_use_the_same_loader(folder, capsys):
    mapping = folder / "map.yaml"
    mapping.write_text(ALIAS_BOMB + "default: aimc\nlayers: {conv: aimc, fc: *a8}\n")
    refused(["run", folder / "model.h5", "--mapping", mapping, "-o", folder / "out.h5"], folder, capsys,
            "map.yaml: field '<yaml>'")
    mapping.write_text("default: aimc\nlayers:\n  conv: aimc\n  conv: digital\n")
    refused(["run", folder / "model.h5", "--mapping", mapping, "-o", folder / "out.h5"], folder, capsys,
            "map.yaml: field 'layers.conv': given twice")
    os.remove(mapping)
    os.mkfifo(mapping)
    refused(["run", folder / "model.h5", "--mapping", mapping, "-o", folder / "out.h5"], folder, capsys,
            "field 'mapping'", "not a regular file")


def test_noise_snippets_on_the_command_line(folder, capsys):
    refused(["run", folder / "model.h5", "--noise", "{model: pcm_like, a: &x [1, 2], b: *x, c: *x}"], folder, capsys)
    refused(["run", folder / "model.h5", "--noise", "{model: " + "[" * 200 + "]" * 200 + "}"], folder, capsys,
            "--noise: field '<yaml>': nested deeper than 64 levels")
    refused(["run", folder / "model.h5", "--noise", "{model: pcm_like, model: hermes}"], folder, capsys,
            "--noise: field 'model': given twice")


def test_a_sweep_config_with_a_grid_key_twice_is_refused(folder, capsys):
    config = folder / "sweep.yaml"
    config.write_text(f"output: {folder / 'sw'}\nnoise: {{model: pcm_like}}\nmapping: all\ngrid:\n"
                      "  noise.prog_noise_scale: [0.5, 1.0]\n  noise.prog_noise_scale: [2.0]\n")
    refused(["sweep", "--config", config, "--check"], folder, capsys,
            "sweep.yaml: field 'grid.noise.prog_noise_scale': given twice in one mapping (lines 5 and 6)")
    assert not (folder / "sw").exists()


def test_the_loader_keeps_what_is_valid():
    """Anchors and aliases within the limits, merge keys and a BOM are ordinary YAML."""
    text = "\ufeffbase: &b {model: pcm_like, t: 1}\nnoise:\n  <<: *b\n  t: 2\nlist: [*b, *b]\n"
    value = parse_yaml(text, "<test>")
    assert value["noise"] == {"model": "pcm_like", "t": 2} and value["list"] == [value["base"]] * 2
    with pytest.raises(FormatError, match=r"<test>: field '<yaml>': more than 100 aliases \(line 2\)"):
        parse_yaml("a: &a 1\nb: [" + ", ".join(["*a"] * 101) + "]\n", "<test>")
    # 100 aliases of a list of 999 values: under the alias limit, over the expanded-size limit.
    with pytest.raises(FormatError, match="more than 100000 values once aliases are expanded"):
        parse_yaml("a: &a [" + ", ".join(["1"] * 999) + "]\nb: [" + ", ".join(["*a"] * 100) + "]\n", "<test>")
    # Just under the limit (99004 values) loads: the limit is where the docs say, not 10x off.
    parse_yaml("a: &a [" + ", ".join(["1"] * 999) + "]\nb: [" + ", ".join(["*a"] * 98) + "]\n", "<test>")
    parse_yaml("x: " + "[" * 63 + "]" * 63, "<test>")
    with pytest.raises(FormatError, match="nested deeper than 64"):
        parse_yaml("x: " + "[" * 64 + "]" * 64, "<test>")


def test_numbers_in_exponent_form_are_numbers_as_in_yaml_1_2():
    """PyYAML reads YAML 1.1, where 5e-1 (no dot) and 1.0e5 (no exponent sign) are strings; a noise
    scale written so was refused as 'a string'.  They load as floats; what is not a number stays text."""
    value = parse_yaml("a: [5e-1, 1E3, 1.0e5, -2e+5, 1_0e1, .5e1, -.5E-1, 0.5, 1.0e-5, 10, '5e-1', 5e, e5, 1e3x, "
                       "0x10, ., .e5, .inf]", "<test>")
    assert value["a"][:-1] == [0.5, 1000.0, 1e5, -2e5, 100.0, 5.0, -0.05, 0.5, 1e-5, 10, "5e-1", "5e", "e5", "1e3x",
                               16, ".", ".e5"]
    assert [type(v) for v in value["a"][:9]] == [float] * 9 and value["a"][-1] == float("inf")
    import yaml
    assert yaml.safe_load("a: 5e-1") == {"a": "5e-1"}  # PyYAML's own loader is left as it is


def test_a_noise_value_of_the_wrong_type_is_shown_in_the_error(folder, capsys):
    config = folder / "typed.yaml"
    config.write_text("mapping: all\nnoise:\n  model: pcm_like\n  prog_noise_scale: 5e-1\n")
    from aimcemu.config import RunConfig
    assert RunConfig.resolve(config).noise.to_dict()["prog_noise_scale"] == 0.5
    config.write_text("mapping: all\nnoise:\n  model: pcm_like\n  prog_noise_scale: half\n")
    refused(["run", "--config", config], folder, capsys,
            "typed.yaml: field 'noise': noise model 'pcm_like': field 'prog_noise_scale': expected a number, got a string 'half'")
    long_text = "x" * 500
    config.write_text(f"mapping: all\nnoise:\n  model: pcm_like\n  prog_noise_scale: {long_text}\n")
    refused(["run", "--config", config], folder, capsys, "got a string '" + "x" * 79 + "...")


def test_a_noise_snippet_without_a_space_after_the_colon_says_so(folder, capsys):
    """'{model:pcm_like}' is one YAML key 'model:pcm_like' without a value: the message said only that
    'model' was missing."""
    refused(["run", "--noise", "{model:pcm_like,prog_noise_scale:2}"], folder, capsys,
            "--noise: field 'noise': noise config: field 'model': missing",
            "YAML needs a space after ':' ({model: pcm_like}, not {model:pcm_like})")
    refused(["run", "--noise", "{model: pcm_like,prog_noise_scale:2}"], folder, capsys,
            "field 'prog_noise_scale:2': no value", "YAML needs a space after ':'")
    from aimcemu import cli
    assert cli.main(["run", "--noise", "{model: pcm_like, prog_noise_scale: }"]) == 2
    err = capsys.readouterr().err
    assert "field 'prog_noise_scale': no value" in err and "space after" not in err  # a value really left out: no hint
