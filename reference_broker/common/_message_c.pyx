# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled twin of ``message.string_to_properties`` and ``message.bytes_to_properties`` (the format is
described in message.py): one pass over the text or bytes, no list of pieces. Anything but an exact str
(bytes) is handed to the pure function."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_CheckExact, PyUnicode_DecodeUTF8
from libc.string cimport memchr

cdef extern from "Python.h":
    Py_ssize_t PyUnicode_FindChar(object s, Py_UCS4 ch, Py_ssize_t start, Py_ssize_t end, int direction) except -2
    object PyUnicode_Substring(object s, Py_ssize_t start, Py_ssize_t end)
    Py_ssize_t PyUnicode_GET_LENGTH(object s)

cdef object _pure_string = None
cdef object _pure_bytes = None


def bind(pure_string_to_properties, pure_bytes_to_properties):
    global _pure_string, _pure_bytes
    _pure_string, _pure_bytes = pure_string_to_properties, pure_bytes_to_properties


def string_to_properties(text):
    """Each piece between ``\\x02``s splits at its first ``\\x01``; pieces without one, or with an empty name
    or value, are dropped; a later name wins (message.string_to_properties)."""
    cdef Py_ssize_t n, start, end, sep
    if not PyUnicode_CheckExact(text):
        return _pure_string(text)
    out = {}
    n = PyUnicode_GET_LENGTH(text)
    start = 0
    while start <= n:
        end = PyUnicode_FindChar(text, 2, start, n, 1)
        if end < 0:
            end = n
        sep = PyUnicode_FindChar(text, 1, start, end, 1)
        if start < sep and sep + 1 < end:
            out[PyUnicode_Substring(text, start, sep)] = PyUnicode_Substring(text, sep + 1, end)
        start = end + 1
    return out


def bytes_to_properties(raw):
    """The same over UTF-8 bytes, each name and value decoded with "replace" (the separators are ASCII, so
    a piece decodes as it would inside the whole: message.bytes_to_properties)."""
    cdef const char* s
    cdef const char* e
    cdef const char* p
    cdef const char* q
    cdef Py_ssize_t n
    if not PyBytes_CheckExact(raw):
        return _pure_bytes(raw)
    out = {}
    n = PyBytes_GET_SIZE(raw)
    s = PyBytes_AS_STRING(raw)
    while n >= 0:
        p = <const char*>memchr(s, 2, n)
        e = p if p != NULL else s + n
        q = <const char*>memchr(s, 1, e - s)
        if q != NULL and q > s and q + 1 < e:
            out[PyUnicode_DecodeUTF8(s, q - s, "replace")] = PyUnicode_DecodeUTF8(q + 1, e - q - 1, "replace")
        n -= (e - s) + 1
        s = e + 1
    return out
