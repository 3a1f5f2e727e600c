"""Derivative rules, one module per op family; importing registers them."""
from . import elementwise, linalg, reduction, shape  # noqa: F401
from . import indexing  # noqa: F401  (after shape: reads its grid placements)
from . import pooling, resampling  # noqa: F401
from . import conv_fast  # noqa: F401  (after linalg: wraps its Conv transpose)
from . import multilinear, normalization  # noqa: F401
from . import control_flow  # noqa: F401,E402  (last: its fallbacks yield to family files)
from . import recurrent  # noqa: F401,E402  (after control_flow: wraps its stand-in transpose)


def _resetting(rule):
    """Region transposes erase ops: symbolic extents cached before are reset."""
    def run(*args):
        try:
            return rule(*args)
        finally:
            from .. import symdims
            symdims.reset()
    return run


def _wrap_region_transposes() -> None:
    from ..registry import TRANSPOSE
    from .control_flow import PLACEHOLDER
    TRANSPOSE[PLACEHOLDER] = _resetting(TRANSPOSE[PLACEHOLDER])


_wrap_region_transposes()
