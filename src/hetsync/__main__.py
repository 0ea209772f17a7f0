import sys

from hetsync.cli import main

sys.exit(main())
