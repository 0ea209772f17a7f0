"""A user module whose import raises (tests/test_user_policy.py)."""

raise RuntimeError("this module needs a GPU cluster")
