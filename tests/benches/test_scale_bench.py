"""hetsync bench scale: the pure pieces, the table's rows and the picture
(figures made up here; the bench itself is run by hand, docs/results-scale.md),
and one quick real cell."""

import json

import pytest

from hetsync.benches import scale, scale_loop
from hetsync.cli import main


@pytest.mark.parametrize("millions", [1, 12, 50])
def test_the_mlp_has_about_the_asked_parameter_count(millions):
    model, shape, tokens = scale_loop.build(f"mlp-{millions}")
    params = sum(p.numel() for p in model.parameters())
    assert abs(params - millions * 1e6) / (millions * 1e6) < 0.01 and shape == (784,) and not tokens


def test_a_step_is_the_median_gap_between_step_ends_after_the_warm_up():
    ends = [0.0, 5.0, 5.5, 6.0, 6.1, 6.2, 6.4, 6.5]  # the first gaps (start-up) are left out
    assert scale.median_step_s(ends) == pytest.approx(0.1)
    # a round every 4 steps: 3 local steps of 0.1 s and a round of 0.5 s count as 0.2 s a step, not 0.1
    rounds = [0.0, 1.0, 2.0, 3.0]  # (the warm-up's gaps)
    for _ in range(3):
        for gap in (0.1, 0.1, 0.1, 0.5):
            rounds.append(rounds[-1] + gap)
    assert scale.median_step_s(rounds) == pytest.approx(0.1) and scale.median_step_s(rounds, 4) == pytest.approx(0.2)


def test_nominal_bytes_a_ring_and_a_server_move():
    m = 4e6  # 1M parameters
    assert scale.nominal_bytes("ps", 4, 1e6) == (2 * m, 8 * m)
    assert scale.nominal_bytes("collective", 4, 1e6) == (3 * m, 3 * m)  # 2·2(N−1)/N of the model
    assert scale.nominal_bytes("ddp", 2, 1e6) == (2 * m, 2 * m)
    assert scale.nominal_bytes("local-sgd", 4, 1e6) == (3 * m / scale_loop.LOCAL_SGD_H,) * 2  # a round every H


def test_a_cell_gives_each_form_its_step_its_ratio_to_ddp_and_rank_0s_share(tmp_path):
    times = {
        "ddp": [{"step_s": 0.2, "params": 1e6, "load": 1.0}],
        "ps": [{"step_s": 0.5, "params": 1e6, "load": 1.0, "server_share": 0.6}],
        "collective": [{"step_s": 0.21, "params": 1e6, "load": 1.0, "server_share": 0.05}],
    }
    rows = scale.cell_rows("mlp-1", 2, 64, times)
    ratio = {r["policy"]: r["value"] for r in rows if r["metric"].startswith("÷")}
    assert ratio == {scale.FORMS["ddp"]: 1.0, scale.FORMS["ps"]: 2.5, scale.FORMS["collective"]: pytest.approx(1.05)}
    cpu = {r["policy"]: r["value"] for r in rows if r["metric"] == "rank 0's CPU"}
    assert cpu[scale.FORMS["ddp"]] is None and cpu[scale.FORMS["ps"]] == pytest.approx(60)
    path = scale.plot_ratios(rows, tmp_path / "scale.png")
    assert path.stat().st_size > 10_000


def test_bad_arguments_exit_2(capsys):
    assert main(["bench", "scale", "--models", "cnn-5"]) == 2
    assert "--models" in capsys.readouterr().err
    assert main(["bench", "scale", "--steps", "2"]) == 2


@pytest.mark.dist
def test_one_quick_cell_runs_ddp_and_the_collective_path(tmp_path):
    path, runs = tmp_path / "rows.json", tmp_path / "runs"
    args = ["bench", "scale", "--models", "mlp-1", "--workers", "2", "--steps", "6", "--forms", "ddp,collective"]
    assert main([*args, "--out", str(runs), "--json", str(path)]) == 0
    rows = json.loads(path.read_text())
    steps = {r["policy"]: r["value"] for r in rows if r.get("metric") == "step"}
    assert set(steps) == {scale.FORMS["ddp"], scale.FORMS["collective"]} and all(v > 0 for v in steps.values())
    (summary,) = json.loads((runs / "mlp-1-2w-collective-0" / "out" / "summary.json").read_text())
    assert summary["path"] == "collective" and summary["server_cpu_s"] > 0
    assert (runs / "scale.png").is_file()
