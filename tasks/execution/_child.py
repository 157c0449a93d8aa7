"""Entry point of the sandbox's template process: `python -I -S _child.py FD PATH...`.

Kept tiny on purpose: a script run as __main__ is compiled on every start, while imported
modules load from cached bytecode. FD is the harness's socket; each PATH (the harness's
site-packages) is appended to sys.path so programs can import what the harness could.
"""

import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _zygote  # noqa: E402

del sys.path[0]
sys.path.extend(p for p in sys.argv[2:] if p not in sys.path)
_zygote.serve(socket.socket(fileno=int(sys.argv[1])))
