"""Data sets and data validation for bnnzoo.

>>> from bnnzoo.data import load
>>> data = load("cosine", seed=0)
>>> data.describe()
'cosine: regression, 100 train / 100 test, input_dim=1'
"""

from .checks import check_data
from .datasets import DATASETS, Dataset, check_load, load, register
from . import tabular as _tabular  # registers the "csv" loader

del _tabular

__all__ = ["DATASETS", "Dataset", "check_data", "check_load", "load", "register"]
