import sys

from raftlog.cli import main

sys.exit(main())
