"""The speed benchmarks as one suite: ``python -m benchmarks --list`` names each and the question it answers.

Each benchmark is a module with ``add_arguments(parser)`` and ``run(args, report)``; ``benchmarks/registry.py`` lists
them, ``benchmarks/common/`` holds what they share (networks and their wrappers, the interleaved timer, the table
printer, the verdict record) and ``benchmarks/reference/`` the comparisons with published code, which need a checkout
of it. This file imports nothing: the reference workers run in other environments and import from below it.
"""
