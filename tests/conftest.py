import os
import sys
import warnings

import torch

# test helpers shared across folders (targets.py) import by plain name
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "inference"))
torch.set_num_threads(1)
warnings.filterwarnings("ignore", message="num_chains=.*available_cpu")
warnings.filterwarnings("ignore", category=FutureWarning, module="arviz")
