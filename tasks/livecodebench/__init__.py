"""LiveCodeBench code generation (``livecodebench/code_generation_lite``), judged as lcb_runner judges it, in the
harness's sandbox.

``dataset`` reads the release files (per version and contest-date window) and decodes the private tests without
running anything; ``prompt`` is lcb_runner's generic chat prompt and its code extraction; ``program`` turns an answer
into the program lcb_runner executes (its import prelude, its stdin wrapping); ``child`` runs it on the tests inside
the sandbox; ``judge`` compares what came back with the expected outputs; ``task`` is the harness task.
"""
