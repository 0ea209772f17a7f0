from hetsync.sim.engine import Simulation
from tests.sim.conftest import make_scenario


def test_same_seed_gives_byte_identical_traces(tmp_path):
    sc = make_scenario(
        workers=5,
        slowdown={"uniform": [1, 3]},
        jitter=0.3,
        straggler_prob=0.1,
        straggler_factor=4.0,
        bandwidth_Bps=2e6,
        latency_s=0.001,
        max_steps=15,
    )
    paths = []
    for i in range(2):
        p = tmp_path / f"t{i}.jsonl"
        Simulation(sc, "ssp:s=2", trace_path=p).run()
        paths.append(p)
    a, b = (p.read_bytes() for p in paths)
    assert a == b and len(a) > 1000


def test_different_seed_changes_the_trace(tmp_path):
    traces = []
    for seed in (1, 2):
        p = tmp_path / f"s{seed}.jsonl"
        Simulation(make_scenario(jitter=0.3, seed=seed), "asp", trace_path=p).run()
        traces.append(p.read_bytes())
    assert traces[0] != traces[1]
