"""sagerl: SAGE (Shaping Anchors for Guided Exploration) for RLVR on LLMs.

Layers, from the bottom up (imports point downward only):

- ``sagerl.objective``: the pure-torch objective (guides, anchor divergences, advantages, policy loss).
- ``sagerl.grading``: answer extraction and verification (math-verify), Knights-and-Knaves checker.
- ``sagerl.models``: model loading, the embedded SmolLM2 default.
- ``sagerl.tasks``: datasets (named sets, JSONL, hub), prompts, the built-in arithmetic task.
- ``sagerl.eval``: samplers, unbiased pass@k, results, plots, compare.
- ``sagerl.train``: the TRL adapter (``SAGETrainer``, ``SAGEConfig``), presets, run folders.
- ``sagerl.cli``: ``sagerl train | eval | compare``.
"""

__version__ = "0.1.0"
