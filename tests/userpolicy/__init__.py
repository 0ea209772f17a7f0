"""A package of the kind a researcher writes: a policy that is not part of hetsync."""
