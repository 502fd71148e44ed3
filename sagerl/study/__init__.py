"""``sagerl study``: presets × seeds × overrides -> one train + eval run folder per cell -> one table.

- :mod:`sagerl.study.spec`: the study file (:func:`load_study`, :class:`Study`, :class:`Cell`).
- :mod:`sagerl.study.folders`: the study folder's layout, each cell's status file.
- :mod:`sagerl.study.runner`: running cells, resumable, failures recorded (:func:`run_study`).
- :mod:`sagerl.study.statistics`: t intervals, the pooled interval over builds, paired differences.
- :mod:`sagerl.study.table`: mean and 95% CI over seeds of every metric, ``table.md`` and plots.
- :mod:`sagerl.study.frontier`: the Pareto frontier of two metrics, ``frontier.md`` and ``pareto.png``.
"""

from sagerl.study.runner import (
    cell_commands,
    check_finished_cells,
    reference_commands,
    run_study,
    study_folder,
)
from sagerl.study.spec import Cell, Study, load_study, parse_study
from sagerl.study.statistics import t_interval
from sagerl.study.table import collect, write_study_table

__all__ = [
    "Cell",
    "Study",
    "cell_commands",
    "check_finished_cells",
    "collect",
    "load_study",
    "parse_study",
    "reference_commands",
    "run_study",
    "study_folder",
    "t_interval",
    "write_study_table",
]
