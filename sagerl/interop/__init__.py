"""Other tools' evaluation files in and out: the SAGE authors' ``evaluation_results.json`` and lighteval's
results and details become sagerl evaluation folders (:mod:`.sage_eval`, :mod:`.lighteval`), and a sagerl
evaluation becomes a lighteval results file (:func:`.lighteval.export_lighteval`).

An imported folder has the layout ``sagerl eval`` writes (``eval_config.json``, ``samples.jsonl``,
``results.json``, ``passk.png``: :mod:`.imported`), so ``sagerl compare`` and ``sagerl analyze support``
read it unchanged. The pass@k, its bootstrap CIs and the per-problem counts are computed by
:mod:`sagerl.eval` from the file's per-sample outcomes, never copied from the file's own summaries.
"""

from sagerl.interop.imported import IMPORT_KEY, ImportedEval, write_imported
from sagerl.interop.lighteval import export_lighteval, import_lighteval, read_lighteval
from sagerl.interop.sage_eval import import_sage_eval, read_sage_eval

__all__ = [
    "IMPORT_KEY",
    "ImportedEval",
    "export_lighteval",
    "import_lighteval",
    "import_sage_eval",
    "read_lighteval",
    "read_sage_eval",
    "write_imported",
]
