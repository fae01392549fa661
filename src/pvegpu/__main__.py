import sys

from pvegpu.cli import main

sys.exit(main())
