import pytest

from hetsync.errors import BadInput
from hetsync.scenario import load_scenario, scenario_from_dict


def test_with_workers_resolves_generators_again():
    sc = load_scenario("wbsp-h1")  # delay_s: {workers: half, value: 0.5} on 8 workers
    assert sc.delay_s == (0, 0, 0, 0, 0.5, 0.5, 0.5, 0.5)
    assert sc.with_workers(4).delay_s == (0, 0, 0.5, 0.5)  # still half of them
    lin = scenario_from_dict({"workers": 5, "max_steps": 1, "slowdown": {"linspace": [1, 3]}})
    assert lin.with_workers(3).slowdown == (1.0, 2.0, 3.0)


def test_with_workers_cycles_explicit_lists():
    sc = scenario_from_dict({"workers": 3, "max_steps": 1, "slowdown": [1, 2, 3]})
    assert sc.with_workers(5).slowdown == (1, 2, 3, 1, 2)
    assert sc.with_workers(2).slowdown == (1, 2)


def test_per_worker_forms_and_errors_name_the_key():
    sc = scenario_from_dict({"workers": 4, "max_steps": 1, "slowdown": {"cycle": [1, 2]}, "bandwidth_Bps": "1.25e8"})
    assert sc.slowdown == (1, 2, 1, 2) and sc.bandwidth_Bps == (1.25e8,) * 4
    with pytest.raises(BadInput, match="'slowdown'"):
        scenario_from_dict({"workers": 4, "max_steps": 1, "slowdown": [1, 2]})
    with pytest.raises(BadInput, match="'source'"):
        scenario_from_dict({"workers": 4, "max_steps": 1, "source": {}})
    with pytest.raises(BadInput, match="half"):
        scenario_from_dict({"workers": 4, "max_steps": 1, "delay_s": {"workers": "most", "value": 1}})


def test_every_builtin_loads():
    from hetsync.scenario import builtin_scenarios

    for name in builtin_scenarios():
        assert load_scenario(name).workers >= 1


def test_a_workers_override_fits_the_files_lists_instead_of_refusing_them():
    sc = load_scenario("p2p-bw", workers=6)  # explicit link_load workers up to 14, bandwidth cycle
    assert sc.link_load is not None and sc.link_load.workers == (1, 2, 5)
    assert sc.bandwidth_Bps == (1.25e7, 3.125e7, 1.25e8, 1.25e9, 1.25e7, 3.125e7)
    assert load_scenario("default", workers=4).slowdown == (1.0, 1.0, 1.0, 1.25)  # an explicit list, cut
    # a list given with the new size is taken as given
    assert load_scenario("default", workers=3, slowdown=[1, 2, 3]).slowdown == (1.0, 2.0, 3.0)
