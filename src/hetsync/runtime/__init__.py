"""The torch.distributed runtime: the same policies, as real processes.

Rank 0 is the server (it runs the policy and holds the global model); ranks
1..N are workers. Launch on one machine with ``hetsync run``, or on several
with ``torchrun ... -m hetsync.runtime`` (see the README).
"""
