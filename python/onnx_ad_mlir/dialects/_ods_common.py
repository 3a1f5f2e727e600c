"""The generated op classes import `._ods_common`; they get the bindings' own."""
from mlir.dialects._ods_common import *  # noqa: F401,F403
from mlir.dialects._ods_common import _cext  # noqa: F401
