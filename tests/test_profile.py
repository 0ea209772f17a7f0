"""hetsync profile: the fits on synthetic measurements, and one short real
profile of an emulated cluster that must recover its step times and links."""

from __future__ import annotations

import json
import math
import statistics

import numpy as np
import pytest

from hetsync import profile
from hetsync.cli import main
from hetsync.scenario import load_scenario


def steps_of(batch_seconds, *, start=0.0):
    """Rows (start_s, batch, seconds, measured_s) back to back."""
    rows, t = [], start
    for b, s in batch_seconds:
        rows.append([t, b, s, s])
        t += s
    return rows


def cpu_steps(fixed_s, per_sample_s, *, sizes=(16, 32, 64), reps=30, slow=1.0, delay_s=0.0, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(reps):
        for b in sizes:
            base = (fixed_s + per_sample_s * b) * slow
            pairs.append((b, base * math.exp(rng.normal(0, noise)) + delay_s))
    return steps_of(pairs)


# ------------------------------------------------------------- compute fits
def test_decompose_tells_a_slower_processor_from_a_constant_delay():
    fits = [
        profile.fit_worker(0, cpu_steps(0.002, 0.0005)),
        profile.fit_worker(1, cpu_steps(0.002, 0.0005, slow=3.0)),
        profile.fit_worker(2, cpu_steps(0.002, 0.0005, delay_s=0.01)),
    ]
    fixed_s, per_sample_s, slow, delay, ref = profile.decompose(fits, 32)
    assert ref == 0 and fixed_s == pytest.approx(0.002) and per_sample_s == pytest.approx(0.0005)
    assert slow == pytest.approx([1.0, 3.0, 1.0], rel=1e-6)
    assert delay == pytest.approx([0.0, 0.0, 0.01], abs=1e-9)


def test_when_the_per_sample_cost_is_too_small_to_tell_every_difference_is_a_delay():
    fits = [profile.fit_worker(0, cpu_steps(0.005, 1e-7)), profile.fit_worker(1, cpu_steps(0.005, 1e-7, slow=3.0))]
    _, _, slow, delay, _ = profile.decompose(fits, 32)
    assert slow == [1.0, 1.0] and delay[1] == pytest.approx(0.01, rel=1e-3)


def test_the_base_is_the_gradient_alone_so_the_runtime_can_play_the_cluster_again():
    # an emulated cluster: every step is a 0.3 ms gradient, then a sleep of 10 ms (worker 0) or 30 ms (worker 1)
    fits = []
    for w, delay_s in enumerate((0.010, 0.030)):
        rows = steps_of([(b, 0.0003 + delay_s) for _ in range(20) for b in (16, 32, 64)])
        for r in rows:
            r[3] = 0.0003
        fits.append(profile.fit_worker(w, rows))
    fixed_s, per_sample_s, slow, delay, ref = profile.decompose(fits, 32)
    assert ref == 0 and fixed_s + 32 * per_sample_s == pytest.approx(0.0003)
    assert slow == [1.0, 1.0] and delay == pytest.approx([0.010, 0.030])


def test_transient_stragglers_and_noise_are_recovered():
    rng = np.random.default_rng(1)
    per_worker = []
    for _ in range(4):
        pairs = []
        for _ in range(400):
            s = 0.01 * math.exp(rng.normal(0, 0.05))
            pairs.append((32, s * 6 if rng.random() < 0.05 else s))
        per_worker.append(steps_of(pairs))
    prob, factor, count, total = profile.fit_transients(per_worker, [0.0] * 4)
    assert total > 1500 and prob == pytest.approx(0.05, abs=0.015) and factor == pytest.approx(6.0, rel=0.1)
    assert profile.fit_jitter(per_worker, [0.0] * 4) == pytest.approx(0.05, rel=0.2)
    assert profile.fit_load(per_worker, [0.0] * 4) is None  # isolated spikes are no load


def test_a_square_wave_load_is_load_not_stragglers():
    pairs, t = [], 0.0
    while t < 20:
        s = 0.01 * (3.0 if (t % 4.0) < 1.0 else 1.0)  # x3 for 1 s of every 4 s
        pairs.append((32, s))
        t += s
    loaded = steps_of(pairs)
    quiet = steps_of([(32, 0.01)] * len(pairs))
    load = profile.fit_load([quiet, loaded], [0.0, 0.0])
    assert load is not None and load.workers == (1,)
    assert load.factor == pytest.approx(3.0, rel=0.05) and load.period_s == pytest.approx(4.0, rel=0.05)
    assert load.on_s == pytest.approx(1.0, rel=0.1)
    prob, *_ = profile.fit_transients([quiet, loaded], [0.0, 0.0])
    assert prob == 0.0
    assert all(type(v) in (int, float, list) for v in load.to_yaml().values())  # plain numbers: YAML writes them


def test_a_gpu_knee_shows_only_where_the_curve_is_flat_then_linear():
    flat_then_linear = [(b, 0.01 + 0.0002 * max(0, b - 64)) for b in (16, 32, 64, 128, 256)]
    k = profile.fit_knee(flat_then_linear)
    assert k is not None and k[0] == 64 and k[1] == pytest.approx(0.01) and k[2] == pytest.approx(0.0002)
    assert profile.fit_knee([(b, 0.002 + 0.0001 * b) for b in (16, 32, 64, 128, 256)]) is None
    assert profile.fit_knee(flat_then_linear[:3]) is None  # too few sizes to tell


def test_link_fit_recovers_latency_and_bandwidth():
    rows = []
    for _ in range(5):
        for nb in (4, 5000, 20000, 40000):
            one_way = 0.0002 + nb / 1e7
            rows.append([nb, one_way + 0.0002])  # there, and the acknowledgement's latency back
    rows += [[4, 0.01], [20000, 0.5]]  # hiccups: the fastest repetition ignores them
    fit = profile.fit_link(0, 1, rows)
    assert fit.latency_s == pytest.approx(0.0002, rel=0.01) and fit.Bps == pytest.approx(1e7, rel=0.01)


# ---------------------------------------------------------------- real job
EMULATED = """\
name: emu
workers: 3
workload: digits-mlp
batch_size: 32
lr: 0.5
target_accuracy: 0.8
max_time_s: 1
eval_every_s: 0.25
policies: [bsp, asp]
delay_s: [0.04, 0.04, 0.12]
bandwidth_Bps: [1.0e6, 1.0e6, 2.5e5]
latency_s: 0.0005
"""
STEP_TOLERANCE = 0.15  # the profile's step time per worker against the emulated one
# (delays of tens of ms: a loaded 2-core machine wakes a sleeping process a few ms late, which the profile sees)
LINK_TOLERANCE = 0.20


@pytest.mark.dist
def test_profile_recovers_an_emulated_cluster_and_the_simulator_runs_it(tmp_path, capsys):
    emu = tmp_path / "emu.yaml"
    emu.write_text(EMULATED)
    out = tmp_path / "prof"
    argv = ["profile", "--emulate", str(emu), "--compute-s", "2", "--link-reps", "3", "-o", str(out)]
    assert main(argv) == 0
    shown = capsys.readouterr().out
    assert "next: hetsync advise -s" in shown
    prof = json.loads((out / "profile.json").read_text())
    emulated = load_scenario(str(emu))
    # an emulated step is the real gradient (its time recorded apart, before the sleep) times the slowdown,
    # plus the delay: what the profile should recover from the steps' total times
    raw = json.loads((out / "raw.json").read_text())
    truth = []
    for w in range(3):
        gradient_s = statistics.median(r[3] for r in raw["per_rank"][w + 1]["compute"]["steps"] if r[1] == 32)
        truth.append(gradient_s * emulated.slowdown[w] + emulated.delay_s[w])
    for w, step_s in enumerate(prof["step_s"]):
        assert step_s == pytest.approx(truth[w], rel=STEP_TOLERANCE), (w, prof["step_s"], truth)
    assert prof["step_s"][2] / prof["step_s"][0] == pytest.approx(truth[2] / truth[0], rel=STEP_TOLERANCE)
    for w, bw in enumerate(prof["bandwidth_Bps"]):
        assert bw == pytest.approx(emulated.bandwidth_Bps[w], rel=LINK_TOLERANCE), (w, prof["bandwidth_Bps"])
    pair = next(lk for lk in prof["links"] if (lk["a"], lk["b"]) == (2, 3))  # workers 1 and 2: the slower end
    assert pair["Bps"] == pytest.approx(2.5e5, rel=LINK_TOLERANCE)
    # the written scenario runs as it is, and keeps the job's keys
    cluster = load_scenario(str(out / "cluster.yaml"))
    assert cluster.workers == 3 and cluster.workload == "digits-mlp" and cluster.policies == ("bsp", "asp")
    assert cluster.nominal_step_s(2, 32) == pytest.approx(prof["step_s"][2], rel=1e-3)
    assert (out / "profile.png").read_bytes()[:4] == b"\x89PNG"
    assert "data:image/png;base64," in (out / "profile.html").read_text()
    assert "| worker |" in (out / "profile.md").read_text()
    cmp = ["compare", "-s", str(out / "cluster.yaml"), "--set", "max_time_s=0.5", "-o", str(tmp_path / "cmp")]
    assert main([*cmp, "--no-plots"]) == 0
    runs = json.loads((tmp_path / "cmp" / "summary.json").read_text())
    assert [r["label"] for r in runs] == ["bsp", "asp"]
    # the same measurements fitted again from raw.json (as after a torchrun job on a real cluster): the same scenario
    again = tmp_path / "again"
    assert main(["profile", "--from-raw", str(out / "raw.json"), "-s", str(emu), "-o", str(again), "--no-plots"]) == 0
    assert json.loads((again / "profile.json").read_text())["step_s"] == prof["step_s"]
    strip = lambda text: [ln for ln in text.splitlines() if not ln.startswith("#")]  # noqa: E731
    assert strip((again / "cluster.yaml").read_text()) == strip((out / "cluster.yaml").read_text())


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--emulate", "hetero-4", "--nproc", "3"], "--nproc 3"),
        (["--batch-sizes", "a,b"], "--batch-sizes"),
        (["--batch-sizes", "0,8"], "--batch-sizes"),
        (["--link-reps", "0"], "--link-reps"),
        (["--emulate", "no-such-cluster"], "no-such-cluster"),
        (["--from-raw", "TMP/raw.json", "--nproc", "5"], "profiled 3 workers, not --nproc 5"),
        (["--from-raw", "TMP/other.json"], "not a raw.json"),
        (["--from-raw", "TMP/missing.json"], "cannot read"),
        (["--script", "TMP/no-such-script.py"], "no such file"),
        (["--script", "TMP/raw.json", "--scenario", "default"], "drop --from-raw and --scenario"),
        (["--", "--epochs", "1"], "go to --script's script"),
    ],
)
def test_bad_input_exits_2_with_one_line_before_anything_starts(tmp_path, capsys, extra, needle):
    out = tmp_path / "prof"
    (tmp_path / "raw.json").write_text(json.dumps({"workers": 3, "per_rank": [{}] * 4}))
    (tmp_path / "other.json").write_text(json.dumps({"workers": 3}))
    extra = [str(tmp_path / a[len("TMP/") :]) if a.startswith("TMP/") else a for a in extra]
    assert main(["profile", "-o", str(out), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err and needle in err, err
    assert not (out / "raw.json").exists()
