import sys

from fleetpilot.cli import main

sys.exit(main())
