"""Output files written whole or not at all: a temporary file beside the
target, given the permissions a new file gets (mkstemp makes it 0600), then
renamed over the target."""
from __future__ import annotations

import os
import tempfile
from typing import Callable

import onnx

# Protobuf cannot serialise 2 GB: larger models keep their tensors in a
# `<name>.data` file beside them.
EXTERNAL_DATA_LIMIT = 2**31 - 2**26


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    return os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)


def write_atomic(path: str | os.PathLike, write: Callable[[str], None]) -> None:
    """Calls write(temporary path), then renames that file over `path`."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):  # (else the error names the temporary file)
        raise FileNotFoundError(f"cannot write {path}: there is no folder {folder}")
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    os.close(fd)
    try:
        write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(data)
    write_atomic(path, write)


def save_model(model: onnx.ModelProto, path: str | os.PathLike) -> None:
    """The model at `path`; beyond protobuf's limit with its tensors in
    `<name>.data` beside it (on a copy: `model` is left as it is)."""
    if model.ByteSize() <= EXTERNAL_DATA_LIMIT:
        write_bytes(path, model.SerializeToString())
        return
    external = onnx.ModelProto()
    external.CopyFrom(model)
    onnx.external_data_helper.convert_model_to_external_data(
        external, location=os.path.basename(os.fspath(path)) + ".data")
    write_atomic(path, lambda tmp: onnx.save_model(external, tmp))
