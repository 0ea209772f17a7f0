"""Profile → advise → verify: measure a cluster, simulate every policy on it, run the best for real.

- :mod:`.profile` (``hetsync profile``) measures a cluster and fits a
  scenario to it (``cluster.yaml``): with the built-in job
  (:mod:`.profile_job`, ``torchrun ... -m hetsync.advise.profile_job`` on a
  real cluster) or with the user's own training loop (:mod:`.loop_profile`,
  the profiler ``hetsync.init`` installs under ``hetsync profile --script``).
- :mod:`.advice` (``hetsync advise``): the cluster's features, the
  candidate policies, their simulations over seeds, the ranking and the
  recommendation (:func:`advise`, :class:`Advice`).
- :mod:`.verification` (``hetsync advise --verify``): the shortlist on real
  processes, predicted against measured; on a profiled script's cluster
  :mod:`.verify_script` runs the user's script in place of the built-in
  workload.
- :mod:`.pages`: the ranking and verification tables, the time-to-target
  plot, ``advice.json`` and ``advice.html``.

``from hetsync.advise import X`` gives every public name of :mod:`.advice`,
:mod:`.verification` and :mod:`.pages`; the profile's modules are imported
by their own names (``hetsync.advise.profile``).
"""

from hetsync.advise.advice import (
    BASELINE,
    DEFAULT_SEEDS,
    DILOCO_SGD_INNER_LR,
    GRID,
    INNER_ADAMW,
    PATHS,
    POOL_MIN_WORK_S,
    Advice,
    Candidate,
    Features,
    OnRun,
    Ranked,
    Recommendation,
    advise,
    candidates,
    choice_name,
    compute_clause,
    default_jobs,
    features,
    grid_specs,
    mechanism,
    network_clause,
    not_applicable,
    parse_paths,
    parse_servers,
    rank,
    reason,
    recommend,
    significant,
    simulate,
    speedup,
    split_choice,
    target_text,
    workload_note,
)
from hetsync.advise.pages import (
    ADVICE_HTML,
    ADVICE_JSON,
    PLOTTED_RUNS,
    TTA_PLOT,
    feature_rows,
    plot_tta,
    ranking_table,
    seed_range,
    table_rows,
    verification_rows,
    verification_table,
    write_html,
    write_outputs,
)
from hetsync.advise.verification import (
    HELD_WITHIN,
    NO_EVALUATE,
    VERIFY_DIR,
    Verification,
    Verified,
    check_verifiable,
    median_reached,
    missing_metric,
    seed_folder,
    verified_rows,
    verify,
    verify_args,
)

__all__ = [
    "ADVICE_HTML",
    "ADVICE_JSON",
    "BASELINE",
    "DEFAULT_SEEDS",
    "DILOCO_SGD_INNER_LR",
    "GRID",
    "HELD_WITHIN",
    "INNER_ADAMW",
    "NO_EVALUATE",
    "PATHS",
    "PLOTTED_RUNS",
    "POOL_MIN_WORK_S",
    "TTA_PLOT",
    "VERIFY_DIR",
    "Advice",
    "Candidate",
    "Features",
    "OnRun",
    "Ranked",
    "Recommendation",
    "Verification",
    "Verified",
    "advise",
    "candidates",
    "check_verifiable",
    "choice_name",
    "compute_clause",
    "default_jobs",
    "feature_rows",
    "features",
    "grid_specs",
    "mechanism",
    "median_reached",
    "missing_metric",
    "network_clause",
    "not_applicable",
    "parse_paths",
    "parse_servers",
    "plot_tta",
    "rank",
    "ranking_table",
    "reason",
    "recommend",
    "seed_folder",
    "seed_range",
    "significant",
    "simulate",
    "speedup",
    "split_choice",
    "table_rows",
    "target_text",
    "verification_rows",
    "verification_table",
    "verified_rows",
    "verify",
    "verify_args",
    "workload_note",
    "write_html",
    "write_outputs",
]
