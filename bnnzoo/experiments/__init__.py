"""Studies that RUN engines in order to judge them: comparisons of several engines on
one model and data set, acceptance sweeps and efficiency curves of fixed-step HMC,
grids of engines x options x seeds, and the report written from a comparison.

Every one of them is a :class:`Study`: independent cells (one engine run each) on an
executor, in this process by default or on Ray (``executor="ray"``), each cell
written as it finishes when the study has a folder.

This layer sits above :mod:`bnnzoo.inference` (which it runs) and
:mod:`bnnzoo.diagnostics` (which judges what it ran); only :mod:`bnnzoo.cli` sits
above it. A new study is one new module here.

>>> from bnnzoo.experiments import compare, format_table, write_report
"""

from .acceptance import (
    SWEEP_COLUMNS, EfficiencyCurve, acceptance_cells, acceptance_row, acceptance_sweep, efficiency_cells,
    efficiency_curve, run_sweep, size_cells, size_sweep,
)
from .compare import compare, format_table
from .executors import InProcess, RayExecutor
from .report import write_report
from .study import Cell, Finished, Study
from .sweep import grid_cells, sweep, sweep_counts

__all__ = [
    "SWEEP_COLUMNS", "Cell", "EfficiencyCurve", "Finished", "InProcess", "RayExecutor", "Study", "acceptance_cells",
    "acceptance_row", "acceptance_sweep", "compare", "efficiency_cells", "efficiency_curve", "format_table",
    "grid_cells", "run_sweep", "size_cells", "size_sweep", "sweep", "sweep_counts", "write_report",
]
