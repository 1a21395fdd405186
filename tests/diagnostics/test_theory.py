"""The theory of HMC acceptance (paper 003) and the optimum of a finished efficiency curve:
functions of numbers only."""

import numpy as np
import pytest

from bnnzoo.diagnostics import theoretical_efficiency, theoretical_optimal_acceptance
from bnnzoo.diagnostics.theory import optimal_acceptance


def test_optimal_acceptance_is_the_best_grid_point():
    assert optimal_acceptance([0.99, 0.9, 0.6, 0.1], [1.0, 3.0, 2.0, 0.5]) == (0.9, False)
    assert optimal_acceptance([0.99, 0.9, 0.0], [1.0, 3.0, 0.0]) == (0.9, False)
    assert optimal_acceptance([0.99, 0.9], [5.0, 3.0]) == (0.99, True)


def test_theory():
    assert theoretical_optimal_acceptance(True) == pytest.approx(0.651, abs=1e-3)
    assert theoretical_optimal_acceptance(False) == pytest.approx(0.452, abs=1e-3)
    a = np.array([0.2, theoretical_optimal_acceptance(False), 0.9])
    eff = theoretical_efficiency(a, smooth=False)
    assert eff[1] == pytest.approx(1.0) and eff[0] < 1 and eff[2] < 1
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        theoretical_efficiency([0.5, 1.0])
