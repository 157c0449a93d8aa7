"""HumanEval+ and MBPP+ (evalplus), scored as evalplus 0.3.1 scores but run in the harness's sandbox.

``plus_tasks`` defines the two tasks; ``releases`` reads evalplus's release files; ``groundtruth`` computes the canonical
solutions' outputs; ``solution_runs`` runs a solution on input sets through ``child`` (the program inside the sandbox),
``values`` decodes what it sent back, and ``output_compare`` is evalplus's comparison of one output.
"""
