"""The bridge to lm-eval: the harness's adapters as lm-eval models.

``model`` is the lm-eval ``LM`` subclass on the harness's generation loop, ``plugin`` the import hook that makes plain
``lm_eval --model refusion`` find it on lm-eval 0.4.13, ``dllm_lm_eval`` the ``dllm-lm-eval`` script (lm-eval's
command line with one-line errors), and ``speed_log`` the speed records written beside lm-eval's output.
"""
