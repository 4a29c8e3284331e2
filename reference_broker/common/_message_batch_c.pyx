# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled twin of ``message_batch.decode_batch_entries`` (the entry format is tabled in message_batch.py):
the same checks in the same order, the same BatchDecodeError texts. An object that is not a contiguous
buffer is handed to the pure function."""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release
from cpython.bytes cimport PyBytes_FromStringAndSize

cdef extern from "Python.h":
    # Declared without Cython's ``except -1``: a failure is cleared and handed to the pure function.
    int _get_buffer "PyObject_GetBuffer" (object obj, Py_buffer* view, int flags)
    void PyErr_Clear()

cdef object _pure = None
cdef object _error = None
cdef object _crc32 = None


def bind(pure_decode_batch_entries, batch_decode_error, crc32):
    global _pure, _error, _crc32
    _pure, _error, _crc32 = pure_decode_batch_entries, batch_decode_error, crc32


cdef inline long long _i32(const unsigned char* p) noexcept nogil:
    return <int>((<unsigned int>p[0] << 24) | (<unsigned int>p[1] << 16) | (<unsigned int>p[2] << 8) | p[3])


def decode_batch_entries(data):
    """(flag, body, properties still encoded, body CRC or -1) per entry; BatchDecodeError as the pure one."""
    cdef Py_buffer view
    cdef const unsigned char* b
    cdef Py_ssize_t pos = 0, end, body_at, props_at
    cdef long long total, crc, flag, body_len, props_len
    if _get_buffer(data, &view, PyBUF_SIMPLE) != 0:
        PyErr_Clear()
        return _pure(data)
    if view.itemsize != 1:  # a view of wider items: its length counts items, as the pure function reads it
        PyBuffer_Release(&view)
        return _pure(data)
    try:
        b = <const unsigned char*>view.buf
        end = view.len
        out = []
        while pos < end:
            if end - pos < 22:  # MIN_ENTRY: the 20-byte head and the properties' short length
                raise _error(f"truncated batch entry at byte {pos}")
            total = _i32(b + pos)
            crc = _i32(b + pos + 8)
            flag = _i32(b + pos + 12)
            body_len = _i32(b + pos + 16)
            if total < 22 or pos + total > end or body_len < 0 or body_len > total - 22:
                raise _error(f"bad batch entry size at byte {pos}: total {total}, body {body_len}")
            body_at = pos + 20
            body = PyBytes_FromStringAndSize(<const char*>b + body_at, body_len)
            props_len = <short>((b[body_at + body_len] << 8) | b[body_at + body_len + 1])
            props_at = body_at + body_len + 2
            if props_len < 0 or props_at + props_len != pos + total:
                raise _error(f"bad batch entry properties length at byte {pos}")
            if crc:
                if crc != _crc32(body):
                    raise _error(f"batch entry body CRC mismatch at byte {pos}")
            else:
                crc = -1
            out.append((flag, body, PyBytes_FromStringAndSize(<const char*>b + props_at, props_len), crc))
            pos += total
        if not out:
            raise _error("empty batch")
        return out
    finally:
        PyBuffer_Release(&view)
