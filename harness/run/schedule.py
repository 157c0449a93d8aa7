"""How the run loop batches requests (``--schedule``), as a torch-free module the command line reads.

``continuous``: at most ``--batch-size`` rows in flight, a waiting request taking the row of the first to finish at
the next forward (for the decoders with ``Decoder.stream``); ``static``: batches of ``--batch-size`` requests, each
held until its last row finishes. docs/measurement.md says how each is timed.
"""

from __future__ import annotations

CONTINUOUS, STATIC = "continuous", "static"
SCHEDULES = (CONTINUOUS, STATIC)
