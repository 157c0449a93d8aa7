"""The run loop and what it writes: plan the jobs, generate what the store lacks, score, aggregate, write the run folder.

``runner`` joins tasks and adapters; ``generation`` is the one batch loop (also driven by the lm-eval model);
``store`` is the append-only resume store and ``folder`` the one place that knows a run folder's layout; ``manifest``
records what makes runs comparable and ``compare`` decides whether two runs are; ``ranks`` says which share of the
work this process does; ``threads`` how many CPU threads torch runs (``--threads``); ``presets`` the harness's
own ``--preset smoke``; ``summary`` is the table printed at the end. What keeps a run folder honest: ``versions``
(samples of another decoder version), ``lock`` (one writer per folder), ``space`` (a full disk), ``memory`` (out of
memory during a decode).
"""
