"""hetsync: synchronization policies for training on heterogeneous clusters.

The policy core (``hetsync.policies``, ``hetsync.algos``) is sans-IO and
imports only the standard library and numpy; the simulator (``hetsync.sim``)
runs it in virtual time with real SGD math.
"""

__version__ = "0.1.0"
