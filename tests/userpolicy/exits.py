"""A user module whose import ends the process (tests/test_user_policy.py)."""

import sys

sys.exit(7)
