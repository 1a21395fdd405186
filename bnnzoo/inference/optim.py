from .vi.optim import *  # noqa
