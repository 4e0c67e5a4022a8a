"""Put on PYTHONPATH of an agent, this makes each of its replica processes crash as it starts (exit 3), as a replica
with a broken model file or a driver fault would; the agent's own process is untouched. Python imports
``sitecustomize`` at start, before the module that ``-m`` names runs."""

import os
import sys

if "inference_agent.serving.replica" in sys.orig_argv:
    sys.stderr.write("injected fault: this replica crashes as it starts\n")
    sys.stderr.flush()
    os._exit(3)
