"""Derivative rules, one module per op family; importing registers them."""
from . import elementwise, linalg, reduction, shape  # noqa: F401
from . import pooling  # noqa: F401
from . import conv_fast  # noqa: F401  (after linalg: wraps its Conv transpose)
from . import multilinear, normalization  # noqa: F401
from . import control_flow  # noqa: F401,E402  (last: its fallbacks yield to family files)
from . import recurrent  # noqa: F401,E402  (after control_flow: wraps its stand-in transpose)
