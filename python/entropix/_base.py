"""_base.py — what the package's modules share: the errors and the status check, the step metrics,
numpy views that hold the C memory they show, and the arguments' conversions to C types.
"""
import ctypes
import operator
from collections.abc import Mapping
from ctypes import byref, c_int, c_void_p
from dataclasses import dataclass

import numpy as np

from entropix._lib import Message, Metrics as _CMetrics, lib

ATTN_LAYER_LAST = -1
ATTN_LAYERS_ALL = -2
INT_MIN, INT_MAX = -2**31, 2**31 - 1  # a C int: what every id, position and count is passed as


class EntropixError(RuntimeError):
    """A failed call: .status is the C status (negative), the message is the runtime's."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class EntropixArgumentError(EntropixError, ValueError):
    """A bad argument (ENTROPIX_ERR_ARGUMENT: an id outside the vocabulary, a position past the
    context): also a ValueError, which is what Python code catches for a bad value."""


class EntropixMemoryError(EntropixError, MemoryError):
    """Out of memory (ENTROPIX_ERR_MEMORY): also a MemoryError."""


_ERROR_CLASSES = {-1: EntropixArgumentError, -4: EntropixMemoryError}  # include/entropix.h's statuses


def error(status, message):
    """The exception of a C status: EntropixError, or the subclass its status has."""
    return _ERROR_CLASSES.get(status, EntropixError)(status, message)


def check(status):
    """Raises the status's EntropixError with this thread's message when status is not ENTROPIX_OK (0)."""
    if status != 0:
        raise error(status, lib.entropix_error_last().decode("utf-8", "replace"))


def version():
    return lib.entropix_version().decode()


def cuda_backend():
    """The CUDA backend the library carries ("cuda sm_80 sm_90"), or None: CPU-only."""
    name = lib.entropix_cuda_backend()
    return name.decode() if name else None


@dataclass(frozen=True)
class Metrics:
    """The entropix metrics of one step (bits, bits²; docs/entropix.md)."""
    logits_entropy: float
    logits_varentropy: float
    attn_entropy: float
    attn_varentropy: float
    attn_agreement: float
    attn_interaction_strength: float

    @staticmethod
    def from_c(m):
        return Metrics(m.logits_entropy, m.logits_varentropy, m.attn_entropy, m.attn_varentropy, m.attn_agreement,
                       m.attn_interaction_strength)


def logits_metrics(logits):
    """Entropy and varentropy (bits) of softmax(logits) for any 1-D row (the attention fields 0)."""
    row = np.ascontiguousarray(logits, dtype=np.float32)
    if row.ndim != 1 or row.size == 0:
        raise ValueError(f"logits: a non-empty 1-D row is needed, not an array of shape {row.shape}")
    m = _CMetrics(size=ctypes.sizeof(_CMetrics))
    check(lib.entropix_logits_metrics(row.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), row.size, byref(m)))
    return Metrics.from_c(m)


class _Handle:
    """A C object, freed by free_fn once nothing needs it: the Python object that made it drops it
    on close(), a numpy view of its memory holds it while the view lives, and a handle made from
    another (a state's, from its model's) holds that one until it is freed itself, even where the
    garbage collector finalises both in either order."""

    def __init__(self, ptr, free_fn, parent=None):
        self.ptr, self._free_fn, self._parent, self._children, self._dropped = ptr, free_fn, parent, 0, False
        if parent is not None:
            parent._children += 1

    def __del__(self):
        self._dropped = True
        self._free()

    def _free(self):
        if not self._dropped or self._children or not self.ptr:
            return
        ptr, self.ptr = self.ptr, None
        self._free_fn(ptr)
        parent, self._parent = self._parent, None
        if parent is not None:
            parent._children -= 1
            parent._free()


class _Memory:
    """float32 memory of a C object as numpy sees it (__array_interface__): the array made from it
    keeps it as its base, and it keeps the object's handle, so the memory outlives every view of it."""

    def __init__(self, ptr, shape, strides, owner):
        self.__array_interface__ = {"version": 3, "typestr": np.dtype(np.float32).str, "shape": shape,
                                    "strides": strides, "data": (ctypes.cast(ptr, c_void_p).value, False)}
        self.owner = owner


def _view(ptr, shape, owner, strides=None):
    """A numpy float32 array over ptr's memory (no copy) that keeps owner, a _Handle, alive."""
    return np.asarray(_Memory(ptr, shape, strides, owner))


def _c_int(value, what):
    """value as a C int: a Python or numpy integer (TypeError for anything else, a float included),
    within [INT_MIN, INT_MAX] (OverflowError naming it, where ctypes would wrap it silently)."""
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{what}: an integer is needed, not {type(value).__name__} {value!r}") from None
    if not INT_MIN <= v <= INT_MAX:
        raise OverflowError(f"{what} {v} does not fit a C int [{INT_MIN}, {INT_MAX}]")
    return v


def _text_bytes(text, what):
    """text as the C API's bytes: a str encoded as UTF-8, or bytes as they are (TypeError else)."""
    if isinstance(text, str):
        return text.encode("utf-8")
    if isinstance(text, (bytes, bytearray, memoryview)):
        return bytes(text)
    raise TypeError(f"{what}: a str or bytes is needed, not {type(text).__name__}")


def _ids_array(ids):
    """(a C int array, n) of ids: a sequence of integers or a 1-D numpy integer array (checked
    and converted as a whole), each within a C int."""
    if isinstance(ids, np.ndarray):
        return _ids_from_numpy(ids)
    ids = [_c_int(v, f"id (index {i})") for i, v in enumerate(ids)]
    return (c_int * max(len(ids), 1))(*ids), len(ids)


def _ids_from_numpy(ids):
    if ids.ndim != 1 or ids.dtype.kind not in "iu":
        raise TypeError(f"ids: a 1-D array of integers is needed, not a {ids.ndim}-D array of {ids.dtype}")
    if not len(ids):
        return (c_int * 1)(), 0
    lo, hi = int(ids.min()), int(ids.max())
    if lo < INT_MIN or hi > INT_MAX:
        i = int(np.flatnonzero((ids < INT_MIN) | (ids > INT_MAX))[0])
        raise OverflowError(f"id (index {i}) {int(ids[i])} does not fit a C int [{INT_MIN}, {INT_MAX}]")
    return (c_int * len(ids)).from_buffer(np.array(ids, dtype=np.intc)), len(ids)


def _take_ids(ptr, n):
    """A list of the n ids at ptr, which the library allocated; frees it."""
    try:
        return [ptr[i] for i in range(n)]
    finally:
        lib.entropix_free(ptr)


def _messages(messages):
    """(the C array, n) of messages [{"role", "content"}, ...]; ValueError naming a message's index
    and key where it lacks one or holds something other than a str."""
    messages = list(messages)
    arr = (Message * max(len(messages), 1))()
    for i, m in enumerate(messages):
        arr[i].role, arr[i].content = _message_text(m, i, "role"), _message_text(m, i, "content")
    return arr, len(messages)


def _message_text(message, i, key):
    """message[key], the i-th message's, as the C API's UTF-8 string."""
    if not isinstance(message, Mapping):
        raise ValueError(f"messages[{i}] is a {type(message).__name__}, not a dict with 'role' and 'content'")
    if key not in message:
        raise ValueError(f"messages[{i}] has no {key!r}")
    value = message[key]
    if not isinstance(value, str):
        raise ValueError(f"messages[{i}][{key!r}] is {type(value).__name__} {value!r:.40}, not a str")
    if "\0" in value:
        raise ValueError(f"messages[{i}][{key!r}] holds a NUL character, which would end it in C")
    return value.encode("utf-8")
