# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twin of ``record.prepare_record`` and ``record.write_record`` (the record's layout is tabled in
record.py). Byte for byte what the pure functions write; any argument outside the common shape (a type
other than int/bytes, a value out of its field's range, a buffer too small or read-only, a negative offset)
is handed to the pure function, so errors are the reference's own."""

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_CheckExact
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact
from cpython.memoryview cimport PyMemoryView_FromMemory
from cpython.tuple cimport PyTuple_GET_SIZE
from libc.string cimport memcpy, memset

cdef extern from "Python.h":
    # Declared without Cython's ``except -1``: a failure is cleared and handed to the pure function.
    int _get_buffer "PyObject_GetBuffer" (object obj, Py_buffer* view, int flags)
    void PyErr_Clear()

cdef extern from "Python.h":
    enum: PyBUF_READ

cdef object _pure_prepare = None
cdef object _pure_write = None
cdef object _crc = None
cdef object _layouts = None
cdef object _layout_of = None
cdef object _new_tuple = None
cdef object _prepared_type = None
cdef object _host_bits = None
cdef long long _v6_flags = 0
cdef int _magic = 0


def bind(pure_prepare, pure_write, raw_crc32, layouts, record_layout, prepared_type, host_bits, long long v6_flags,
         int magic):
    """Take record.py's reference functions and tables (no import back into record.py: no cycle)."""
    global _pure_prepare, _pure_write, _crc, _layouts, _layout_of, _new_tuple, _prepared_type, _host_bits
    global _v6_flags, _magic
    _pure_prepare, _pure_write, _crc, _layouts, _layout_of = pure_prepare, pure_write, raw_crc32, layouts, record_layout
    _new_tuple, _prepared_type, _host_bits, _v6_flags, _magic = tuple.__new__, prepared_type, host_bits, v6_flags, magic


def prepare_record(topic_b, body, props_b, queue_id, flag, sys_flag, born_ts, born_ip, born_port, store_ip,
                   store_port, reconsume=0, prepared_offset=0, body_crc=-1):
    """record.prepare_record, the same statements compiled (Python semantics for any argument)."""
    born_v6 = len(born_ip) == 16
    store_v6 = len(store_ip) == 16
    key = (len(body), len(topic_b), len(props_b), born_v6, store_v6)
    layout = _layouts.get(key) or _layout_of(key)
    return _new_tuple(_prepared_type, (
        layout, _crc(body) & 0x7FFFFFFF if body_crc < 0 else body_crc, queue_id, flag,
        (sys_flag & ~_v6_flags) | _host_bits[born_v6, store_v6], born_ts, born_ip, born_port, store_ip,
        store_port, reconsume, prepared_offset, body, topic_b, props_b))


cdef inline void _put32(unsigned char* p, long long v) noexcept nogil:
    p[0] = <unsigned char>(v >> 24)
    p[1] = <unsigned char>(v >> 16)
    p[2] = <unsigned char>(v >> 8)
    p[3] = <unsigned char>v


cdef inline void _put64(unsigned char* p, long long v) noexcept nogil:
    _put32(p, v >> 32)
    _put32(p + 4, v)


cdef inline bint _as_i64(object o, long long* out):
    """An exact int in int64 range (struct's 'q'); False otherwise (the pure path decides)."""
    cdef int overflow = 0
    if not PyLong_CheckExact(o):
        return False
    out[0] = PyLong_AsLongLongAndOverflow(o, &overflow)
    return overflow == 0


cdef inline bint _as_i32(object o, long long* out):
    """An exact int in int32 range (struct's 'i')."""
    return _as_i64(o, out) and -2147483648 <= out[0] <= 2147483647


def write_record(out, at, r, queue_offset, phys_offset, store_ts, prop_crc):
    """record.write_record: the fixed fields, BODY, TOPIC, PROPERTIES, then the whole-record CRC's digits,
    TOTALSIZE last (the same order, for the same reason)."""
    cdef long long v[13]
    cdef long long total = 0, size_crc = 0, crc, qoff = 0, phys = 0, sts = 0
    cdef Py_ssize_t bl, tl, pl, bil, sil, i
    cdef Py_buffer view
    cdef unsigned char* p
    cdef unsigned char* base
    cdef long long pos = 0
    cdef tuple t, lay
    if not (_as_i64(at, &pos) and isinstance(r, tuple) and PyTuple_GET_SIZE(r) == 15
            and isinstance((<tuple>r)[0], tuple)):
        return _pure_write(out, at, r, queue_offset, phys_offset, store_ts, prop_crc)
    # Item by item from the tuple's own array: a NamedTuple's subscript goes through its class's slot.
    t = <tuple>r
    lay = <tuple>t[0]
    body, topic_b, props_b, born_ip, store_ip = t[12], t[13], t[14], t[6], t[8]
    if not (PyBytes_CheckExact(body) and PyBytes_CheckExact(topic_b) and PyBytes_CheckExact(props_b)
            and PyBytes_CheckExact(born_ip) and PyBytes_CheckExact(store_ip)):
        return _pure_write(out, at, r, queue_offset, phys_offset, store_ts, prop_crc)
    bl, tl, pl = PyBytes_GET_SIZE(body), PyBytes_GET_SIZE(topic_b), PyBytes_GET_SIZE(props_b)
    bil, sil = PyBytes_GET_SIZE(born_ip), PyBytes_GET_SIZE(store_ip)
    # body_crc qid flag sysflag born_ts born_port store_port reconsume prepared, then the lock's three
    if not (PyTuple_GET_SIZE(lay) == 4 and _as_i64(lay[1], &total) and _as_i64(lay[3], &size_crc)
            and _as_i32(t[1], &v[0]) and _as_i32(t[2], &v[1]) and _as_i32(t[3], &v[2]) and _as_i32(t[4], &v[3])
            and _as_i64(t[5], &v[4]) and _as_i32(t[7], &v[5]) and _as_i32(t[9], &v[6]) and _as_i32(t[10], &v[7])
            and _as_i64(t[11], &v[8]) and _as_i64(queue_offset, &qoff) and _as_i64(phys_offset, &phys)
            and _as_i64(store_ts, &sts)
            and (bil == 4 or bil == 16) and (sil == 4 or sil == 16) and tl <= 255 and pl <= 65535
            and total == 91 + (bil - 4) + (sil - 4) + bl + tl + pl and pos >= 0):
        return _pure_write(out, at, r, queue_offset, phys_offset, store_ts, prop_crc)
    if _get_buffer(out, &view, PyBUF_WRITABLE) != 0:
        PyErr_Clear()
        return _pure_write(out, at, r, queue_offset, phys_offset, store_ts, prop_crc)  # raises as struct does
    try:
        if pos + total > view.len:
            return _pure_write(out, at, r, queue_offset, phys_offset, store_ts, prop_crc)
        base = <unsigned char*>view.buf + pos
        p = base
        _put32(p, 0); _put32(p + 4, _magic); _put32(p + 8, v[0]); _put32(p + 12, v[1]); _put32(p + 16, v[2])
        _put64(p + 20, qoff); _put64(p + 28, phys); _put32(p + 36, v[3]); _put64(p + 40, v[4])
        p += 48
        memcpy(p, PyBytes_AS_STRING(born_ip), bil); p += bil
        _put32(p, v[5]); p += 4
        _put64(p, sts); p += 8
        memcpy(p, PyBytes_AS_STRING(store_ip), sil); p += sil
        _put32(p, v[6]); _put32(p + 4, v[7]); _put64(p + 8, v[8]); _put32(p + 16, bl); p += 20
        memcpy(p, PyBytes_AS_STRING(body), bl); p += bl
        p[0] = <unsigned char>tl; p += 1
        memcpy(p, PyBytes_AS_STRING(topic_b), tl); p += tl
        p[0] = <unsigned char>(pl >> 8); p[1] = <unsigned char>pl; p += 2
        memcpy(p, PyBytes_AS_STRING(props_b), pl)
        if prop_crc:
            # CRC32_RESERVED_LEN = 20 from the end; the digits follow its 9-byte head (record.py)
            crc = _crc(PyMemoryView_FromMemory(<char*>base + 4, total - 20 - 4, PyBUF_READ), size_crc)
            crc &= 0x7FFFFFFF
            p = base + total - 20 + 9
            for i in range(10):  # crc_digits: least significant digit first
                p[i] = <unsigned char>(48 + crc % 10)
                crc //= 10
        _put32(base, total)
    finally:
        PyBuffer_Release(&view)
    return total
