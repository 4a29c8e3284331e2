# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twins of the index's per-key work: ``java_hash.hash_codes`` (String.hashCode of a run of keys) and
``IndexFile.put_keys``'s linking and writing of a run of entries (the layout is tabled in
store/index_format.py). Byte for byte what the pure functions leave; anything outside the common shape (not a
list of str / int, a value out of its field's range, a buffer too small or read-only) is handed back to the pure
path before a byte is written, so the pure functions stay the reference and their errors are the errors.

Why compiled: the pure path links a run with numpy (a fixed ~1 µs per array operation, ~30 of them a run) and
puts runs shorter than 16 keys one by one in Python; dispatch does this for every message (UNIQ_KEY), so it was
half the dispatch thread's time under batched sends (py-spy, session 33)."""

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE, PyList_CheckExact
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact
from cpython.unicode cimport PyUnicode_CheckExact

cdef extern from "Python.h":
    int _get_buffer "PyObject_GetBuffer" (object obj, Py_buffer* view, int flags)
    void PyErr_Clear()
    Py_ssize_t PyUnicode_GET_LENGTH(object o)
    int PyUnicode_KIND(object o)
    void* PyUnicode_DATA(object o)
    int PyUnicode_1BYTE_KIND
    int PyUnicode_2BYTE_KIND

cdef object _pure_hash_codes = None
cdef object _pure_string_hash = None
cdef long long INT_MIN = -2147483648
cdef long long INT_MAX = 2147483647
# Offsets and store times this path takes: non-negative and small enough that no arithmetic on them overflows
# (a commit-log offset or a time in ms outside this is not the common shape: the pure path has it).
cdef long long VALUE_MAX = 1LL << 62


def bind(pure_hash_codes, pure_string_hash):
    """Take java_hash.py's reference functions (no import back into it: no cycle)."""
    global _pure_hash_codes, _pure_string_hash
    _pure_hash_codes, _pure_string_hash = pure_hash_codes, pure_string_hash


cdef inline int _signed32(unsigned int h) noexcept nogil:
    return <int>h


def hash_codes(strings):
    """String.hashCode of each string: 31*h + c over UTF-16 code units, mod 2^32, as a signed int. A string
    with characters beyond the BMP (surrogate pairs in Java) is hashed by the pure function."""
    if not PyList_CheckExact(strings):
        return _pure_hash_codes(strings)
    cdef Py_ssize_t n = PyList_GET_SIZE(strings), i, j, length
    cdef unsigned int h
    cdef const unsigned char* p1
    cdef const unsigned short* p2
    cdef int kind
    out = [0] * n
    for i in range(n):
        s = <object>PyList_GET_ITEM(strings, i)
        if not PyUnicode_CheckExact(s):
            return _pure_hash_codes(strings)  # the reference's own error (or its answer)
        length = PyUnicode_GET_LENGTH(s)
        kind = PyUnicode_KIND(s)
        h = 0
        if kind == PyUnicode_1BYTE_KIND:
            p1 = <const unsigned char*>PyUnicode_DATA(s)
            for j in range(length):
                h = h * 31u + p1[j]
        elif kind == PyUnicode_2BYTE_KIND:
            p2 = <const unsigned short*>PyUnicode_DATA(s)
            for j in range(length):
                if 0xD800 <= p2[j] <= 0xDFFF:
                    break  # a lone surrogate: the pure function's UTF-16 encode refuses it; let it
                h = h * 31u + p2[j]
            else:
                out[i] = _signed32(h)
                continue
            out[i] = _pure_string_hash(s)
            continue
        else:
            out[i] = _pure_string_hash(s)
            continue
        out[i] = _signed32(h)
    return out


cdef inline void _put32(unsigned char* p, long long v) noexcept nogil:
    p[0] = <unsigned char>(v >> 24)
    p[1] = <unsigned char>(v >> 16)
    p[2] = <unsigned char>(v >> 8)
    p[3] = <unsigned char>v


cdef inline void _put64(unsigned char* p, long long v) noexcept nogil:
    _put32(p, v >> 32)
    _put32(p + 4, v)


cdef inline long long _get32(const unsigned char* p) noexcept nogil:
    return <int>((<unsigned int>p[0] << 24) | (<unsigned int>p[1] << 16) | (<unsigned int>p[2] << 8) | p[3])


cdef inline int _long_at(object seq, Py_ssize_t i, long long lo, long long hi, long long* out):
    cdef int overflow = 0
    v = <object>PyList_GET_ITEM(seq, i)
    if not PyLong_CheckExact(v):
        return 0
    out[0] = PyLong_AsLongLongAndOverflow(v, &overflow)
    if overflow or out[0] < lo or out[0] > hi:
        PyErr_Clear()
        return 0
    return 1


def link_write(buf, Py_ssize_t header_size, Py_ssize_t hash_slot_num, Py_ssize_t entries_at, long long first,
               codes, phys, stamps, Py_ssize_t start, Py_ssize_t stop, long long begin_timestamp):
    """Entries ``first ..`` for keys ``start .. stop - 1`` of the lists, linked into their slot chains and written
    into ``buf`` as ``stop - start`` calls of ``IndexFile.put_key`` leave them (entry, then slot, key by key).
    Returns the number of slots that were empty before (``hashSlotCount``'s increment), or -1 when this is not
    the common shape: nothing is written then, and the caller takes the pure path."""
    cdef Py_buffer view
    cdef Py_ssize_t m = stop - start, i, slot_at, at
    cdef long long code, phy, ts, key_hash, num, old, diff
    cdef long long new_slots = 0
    cdef unsigned char* b
    if (m <= 0 or start < 0 or hash_slot_num <= 0 or header_size < 0 or first <= 0 or first > INT_MAX - m
            or begin_timestamp > VALUE_MAX
            or not PyList_CheckExact(codes) or not PyList_CheckExact(phys) or not PyList_CheckExact(stamps)
            or PyList_GET_SIZE(codes) < stop or PyList_GET_SIZE(phys) < stop or PyList_GET_SIZE(stamps) < stop):
        return -1
    for i in range(start, stop):  # validate all before writing any: a fallback must find the file untouched
        if (not _long_at(codes, i, INT_MIN, INT_MAX, &code) or not _long_at(phys, i, 0, VALUE_MAX, &phy)
                or not _long_at(stamps, i, 0, VALUE_MAX, &ts)):
            return -1
    if _get_buffer(buf, &view, PyBUF_WRITABLE) != 0:
        PyErr_Clear()
        return -1
    try:
        if (header_size + hash_slot_num * 4 > view.len or entries_at < 0
                or entries_at + (first + m) * 20 > view.len):
            return -1
        b = <unsigned char*>view.buf
        for i in range(start, stop):
            _long_at(codes, i, INT_MIN, INT_MAX, &code)
            _long_at(phys, i, 0, VALUE_MAX, &phy)
            _long_at(stamps, i, 0, VALUE_MAX, &ts)
            num = first + (i - start)
            key_hash = 0 if code == INT_MIN else (-code if code < 0 else code)
            slot_at = header_size + (key_hash % hash_slot_num) * 4
            old = _get32(b + slot_at)
            if old <= 0 or old > num:  # a slot value beyond the count is garbage from a reused file
                old = 0
            if begin_timestamp <= 0:
                diff = 0
            else:
                diff = ts - begin_timestamp
                diff = 0 if diff < 0 else diff // 1000
                if diff > INT_MAX:
                    diff = INT_MAX
            at = entries_at + num * 20
            _put32(b + at, key_hash)
            _put64(b + at + 4, phy)
            _put32(b + at + 12, diff)
            _put32(b + at + 16, old)
            _put32(b + slot_at, num)
            if old == 0:
                new_slots += 1
        return new_slots
    finally:
        PyBuffer_Release(&view)
