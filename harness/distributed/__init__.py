"""Data-parallel execution under ``torchrun`` or ``accelerate launch``: the ranks meet (``data_parallel``), rank 0
waits for the others before it scores, and a rank stops when its launcher dies (``launcher_watch``). The runner itself
only knows its share of the work (``harness.run.ranks``)."""
