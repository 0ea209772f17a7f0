"""The YAML reader for user input (hetsync.safeyaml): safe_load's results
for ordinary documents, and refusals, with the line, for duplicate keys,
alias expansion and nesting depth."""

from __future__ import annotations

import time

import pytest
import yaml

from hetsync.errors import BadInput
from hetsync.safeyaml import MAX_ALIAS_NODES, MAX_DEPTH, YAMLLimitError, safe_load
from hetsync.scenario import load_scenario, parse_override


def laughs(levels: int, width: int = 10) -> str:
    lines = [f"a0: &a0 [{', '.join(['lol'] * width)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    "text",
    [
        "workers: 4\nslowdown: [1, 2, 3.5]\nname: x\n",
        "a: &a {x: 1, y: [1, 2]}\nb: *a\nc: *a\n",  # aliases that add little
        "base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  x: 3\n",  # a merge key, then a key beside it
        "",
        "- 1\n- [2, [3, [4]]]\n",
        "a: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "\n",
    ],
)
def test_ordinary_documents_read_as_safe_load_reads_them(text):
    assert safe_load(text) == yaml.safe_load(text)


def test_a_key_given_twice_is_refused_with_its_line():
    with pytest.raises(YAMLLimitError, match=r"key 'lr' is given twice: keep one \(line 4\)"):
        safe_load("workers: 2\nlr: 0.1\nmax_steps: 3\nlr: 5\n")
    with pytest.raises(YAMLLimitError, match="'value' is given twice"):
        safe_load("target: {metric: accuracy, value: 0.5, value: 0.9}")
    with pytest.raises(YAMLLimitError, match="given twice"):
        safe_load("a:\n  b: 1\n  b: 2\n")  # nested mappings too


def test_deep_nesting_is_refused_not_a_recursion_error():
    for text in ("[" * 5000 + "]" * 5000, "".join("  " * i + f"k{i}:\n" for i in range(300))):
        with pytest.raises(YAMLLimitError, match=f"nested more than {MAX_DEPTH} levels deep"):
            safe_load(text)


def test_alias_expansion_is_limited_and_measured_without_expanding():
    assert len(safe_load(laughs(2))["a1"]) == 10  # 100 values from aliases: fine
    t0 = time.perf_counter()
    with pytest.raises(YAMLLimitError, match=f"aliases expand the document by more than {MAX_ALIAS_NODES} values"):
        safe_load(laughs(9))  # a billion laughs
    assert time.perf_counter() - t0 < 2.0
    with pytest.raises(YAMLLimitError, match="aliases expand"):
        safe_load(laughs(4, width=30))  # 27,000 values from 4 lines


def test_an_alias_inside_its_own_anchor_is_refused():
    with pytest.raises(YAMLLimitError, match=r"alias \*a refers to a node that contains it"):
        safe_load("a: &a [1, *a]\n")


def test_limit_errors_are_yaml_errors_and_other_yaml_errors_pass_through():
    assert issubclass(YAMLLimitError, yaml.YAMLError)
    with pytest.raises(yaml.YAMLError):
        safe_load("a: [1\nb: {\n")
    with pytest.raises(yaml.YAMLError, match="undefined alias"):
        safe_load("a: *nope\n")


def test_scenario_files_and_overrides_read_through_the_limits(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("workers: 2\nmax_steps: 1\nworkers: 3\n")
    with pytest.raises(BadInput, match=r"scenario file '.*s\.yaml': key 'workers' is given twice"):
        load_scenario(str(path))
    path.write_text(
        "workers: 2\nmax_steps: 1\ndescription:\n" + "".join("  " + ln + "\n" for ln in laughs(9).splitlines())
    )
    with pytest.raises(BadInput, match="aliases expand"):
        load_scenario(str(path))
    with pytest.raises(BadInput, match="--set slowdown: nested more than"):
        parse_override("slowdown=" + "[" * 200 + "]" * 200)
    assert parse_override("slowdown=[1, 2]") == ("slowdown", [1, 2])


def test_a_huge_scenario_file_is_refused_before_it_is_read(tmp_path):
    from hetsync import limits

    path = tmp_path / "big.yaml"
    with path.open("w") as f:
        f.truncate(limits.MAX_SCENARIO_FILE_BYTES + 1)
    with pytest.raises(BadInput, match="may hold at most"):
        load_scenario(str(path))


def test_a_document_that_takes_too_long_to_read_is_refused_with_its_line(tmp_path, monkeypatch):
    from hetsync import safeyaml

    monkeypatch.setattr(safeyaml, "MAX_READ_S", 0.2)
    many = "workers: 2\nmax_steps: 1\nslowdown: [" + ", ".join(["[1]"] * 200_000) + "]\n"  # under 1 MiB
    t0 = time.perf_counter()
    with pytest.raises(YAMLLimitError, match=r"reading it took longer than 0.2 s, stopped here: .* \(line 3\)"):
        safe_load(many)
    assert time.perf_counter() - t0 < 5.0
    path = tmp_path / "slow.yaml"
    path.write_text(many)
    with pytest.raises(BadInput, match=r"scenario file '.*slow\.yaml': reading it took longer than 0.2 s"):
        load_scenario(str(path))
    monkeypatch.setattr(safeyaml, "MAX_READ_S", 60.0)
    assert safe_load("workers: 2\nslowdown: [1, 2]\n") == {"workers": 2, "slowdown": [1, 2]}
