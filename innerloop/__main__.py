import sys

from innerloop.cli import main

sys.exit(main())
