"""Studies that RUN engines in order to judge them: comparisons of several engines on
one model and data set, acceptance sweeps and efficiency curves of fixed-step HMC,
and the report written from a comparison.

This layer sits above :mod:`bnnzoo.inference` (which it runs) and
:mod:`bnnzoo.diagnostics` (which judges what it ran); only :mod:`bnnzoo.cli` sits
above it. A new study is one new module here.

>>> from bnnzoo.experiments import compare, format_table, write_report
"""

from .acceptance import SWEEP_COLUMNS, EfficiencyCurve, acceptance_sweep, efficiency_curve, size_sweep
from .compare import compare, format_table
from .report import write_report

__all__ = [
    "SWEEP_COLUMNS", "EfficiencyCurve", "acceptance_sweep", "compare", "efficiency_curve", "format_table",
    "size_sweep", "write_report",
]
