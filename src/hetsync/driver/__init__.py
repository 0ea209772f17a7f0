"""What the two drivers share: the driver core (:mod:`.core`: command checks,
trace records, counters, budget, evaluation schedule), the compute timing
model (:mod:`.timing`) and the data paths a round may take (:mod:`.paths`:
``ps`` or ``collective``, and which policies may take which) and the
sharded servers' ranges and refusals (:mod:`.shards`). The simulator
(``hetsync.sim``) and the runtime (``hetsync.runtime``) both import from
here and never from each other."""

from hetsync.driver.core import DriverCore, eval_interval_s, policy_context, policy_labels, policy_specs
from hetsync.driver.timing import TimingModel

__all__ = ["DriverCore", "TimingModel", "eval_interval_s", "policy_context", "policy_labels", "policy_specs"]
