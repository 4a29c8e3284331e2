# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twins of ``record.write_record`` and ``record.scan_records`` (the record's layout is tabled in
record.py). Byte for byte what the pure functions write and read; any argument outside the common shape (a type
other than int/bytes, a value out of its field's range, a buffer too small or read-only, a negative offset)
is handed to the pure function, so errors are the reference's own."""

from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_CheckExact
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact
from cpython.memoryview cimport PyMemoryView_FromMemory
from cpython.tuple cimport PyTuple_GET_SIZE
from libc.string cimport memchr, memcmp, memcpy, memset
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8

cdef extern from "Python.h":
    # Declared without Cython's ``except -1``: a failure is cleared and handed to the pure function.
    int _get_buffer "PyObject_GetBuffer" (object obj, Py_buffer* view, int flags)
    void PyErr_Clear()

cdef extern from "Python.h":
    enum: PyBUF_READ

cdef object _pure_write = None
cdef object _crc = None
cdef long long _v6_flags = 0
cdef int _magic = 0


def bind(pure_write, raw_crc32, long long v6_flags, int magic):
    """Take record.py's reference function and constants (no import back into record.py: no cycle)."""
    global _pure_write, _crc, _v6_flags, _magic
    _pure_write, _crc, _v6_flags, _magic = pure_write, raw_crc32, v6_flags, magic


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


# ---- scan_records: the dispatch and recovery hot path -------------------------------------------------

cdef object _pure_scan = None
cdef object _check_one = None
cdef object _request = None
cdef object _end_limit = None
cdef object _end_blank = None
cdef object _end_bad = None
cdef dict _topics = None
cdef object _tags_hash = None
cdef object _dispatch_props = None
cdef object _schedule_topic = None
cdef Py_ssize_t _topics_max = 0


def bind_scan(pure_scan_records, check_message_and_return_size, dispatch_request, scan_end, dict topic_cache,
              Py_ssize_t topic_cache_max, tags_hash_code, dispatch_props, schedule_topic):
    global _pure_scan, _check_one, _request, _end_limit, _end_blank, _end_bad, _topics, _topics_max, _tags_hash
    global _dispatch_props, _schedule_topic
    _pure_scan, _check_one, _request, _topics, _topics_max = (pure_scan_records, check_message_and_return_size,
                                                              dispatch_request, topic_cache, topic_cache_max)
    _end_limit, _end_blank, _end_bad = scan_end.LIMIT, scan_end.BLANK, scan_end.BAD
    _tags_hash, _dispatch_props, _schedule_topic = tags_hash_code, dispatch_props, schedule_topic


cdef inline long long _get32(const unsigned char* p) noexcept nogil:
    return <int>((<unsigned int>p[0] << 24) | (<unsigned int>p[1] << 16) | (<unsigned int>p[2] << 8) | p[3])


cdef inline long long _get64(const unsigned char* p) noexcept nogil:
    return <long long>((<unsigned long long>(<unsigned int>_get32(p)) << 32) | <unsigned int>_get32(p + 4))


cdef const unsigned char* _find(const unsigned char* s, Py_ssize_t n, const char* k, Py_ssize_t kl) noexcept nogil:
    """The first ``k`` in ``s[:n]`` (bytes.find), or NULL."""
    cdef const unsigned char* p = s
    cdef const unsigned char* e = s + n - kl
    while p <= e:
        p = <const unsigned char*>memchr(p, k[0], e - p + 1)
        if p == NULL:
            return NULL
        if memcmp(p, k, kl) == 0:
            return p
        p += 1
    return NULL


cdef object _property(const unsigned char* s, Py_ssize_t n, bytes name):
    """message.find_property's value, decoded with "replace", or None when absent or empty (_dispatch_props
    asks ``if v``)."""
    cdef const char* k = PyBytes_AS_STRING(name)  # b"\x02NAME\x01"
    cdef Py_ssize_t kl = PyBytes_GET_SIZE(name)
    cdef const unsigned char* v
    cdef const unsigned char* e
    if n >= kl - 1 and memcmp(s, k + 1, kl - 1) == 0:
        v = s + kl - 1
    else:
        v = _find(s, n, k, kl)
        if v == NULL:
            return None
        v += kl
    e = <const unsigned char*>memchr(v, 2, s + n - v)
    if e == NULL:
        e = s + n
    if e == v:
        return None
    return PyUnicode_DecodeUTF8(<const char*>v, e - v, "replace")


cdef bytes _K_TAGS = b"\x02TAGS\x01"
cdef bytes _K_KEYS = b"\x02KEYS\x01"
cdef bytes _K_UNIQ = b"\x02UNIQ_KEY\x01"
cdef bytes _CRC_HEAD = b"__CRC32#\x01"


cdef bint _prop_crc_ok(const unsigned char* rec, long long total) except -1:
    """record.prop_crc_ok: the tail reads ``__CRC32#\\x01`` + this record's ten digits + ``\\x02``."""
    cdef long long crc
    cdef const unsigned char* t
    cdef int i
    if total < 20:
        return False
    t = rec + total - 20
    if memcmp(t, PyBytes_AS_STRING(_CRC_HEAD), 9) != 0 or t[19] != 2:
        return False
    crc = _crc(PyMemoryView_FromMemory(<char*>rec, total - 20, PyBUF_READ)) & 0x7FFFFFFF
    for i in range(10):
        if t[9 + i] != 48 + crc % 10:
            return False
        crc //= 10
    return True


def scan_records(buf, pos, limit, check_crc, delay_table_ms=None, max_records=1 << 30, verify_prop_crc=False):
    """record.scan_records: the common record shape (IPv4 hosts, the 4.x magic code) read here, anything
    else by check_message_and_return_size, in the same order with the same outcome."""
    cdef Py_buffer view
    cdef const unsigned char* b
    cdef long long p0, lim, maxn, n = 0, total, body_len, sys_flag, end, p, tl, pp
    cdef bint short, ccrc = bool(check_crc), vcrc = bool(verify_prop_crc), ok
    if not (_as_i64(pos, &p0) and _as_i64(limit, &lim) and _as_i64(max_records, &maxn)):
        return _pure_scan(buf, pos, limit, check_crc, delay_table_ms, max_records, verify_prop_crc)
    if _get_buffer(buf, &view, PyBUF_SIMPLE) != 0:
        PyErr_Clear()
        return _pure_scan(buf, pos, limit, check_crc, delay_table_ms, max_records, verify_prop_crc)
    try:
        if view.itemsize != 1 or p0 < 0:
            return _pure_scan(buf, pos, limit, check_crc, delay_table_ms, max_records, verify_prop_crc)
        b = <const unsigned char*>view.buf
        short = lim > view.len
        if short:
            lim = view.len
        out = []
        while p0 < lim:
            if n >= maxn:
                return out, p0, _end_limit
            req = None
            if lim - p0 >= 88:
                total = _get32(b + p0)
                body_len = _get32(b + p0 + 84)
                sys_flag = _get32(b + p0 + 36)
                end = p0 + total
                p = p0 + 88 + body_len
                if (_get32(b + p0 + 4) == _magic and not sys_flag & _v6_flags and 91 <= total <= lim - p0
                        and body_len >= 0 and p + 3 <= end):
                    tl = b[p]
                    pp = p + 1 + tl
                    ok = pp + 2 <= end and pp + 2 + ((b[pp] << 8) | b[pp + 1]) == end
                    if ok and ccrc:
                        if vcrc:
                            ok = _prop_crc_ok(b + p0, total)
                        else:
                            ok = (_crc(PyMemoryView_FromMemory(<char*>b + p0 + 88, body_len, PyBUF_READ))
                                  & 0x7FFFFFFF) == _get32(b + p0 + 8)
                    if ok:
                        topic_b = PyBytes_FromStringAndSize(<const char*>b + p + 1, tl)
                        topic = _topics.get(topic_b)
                        if topic is None:
                            try:
                                topic = topic_b.decode("utf-8")
                            except UnicodeDecodeError:
                                return out, p0, _end_bad
                            if len(_topics) >= _topics_max:
                                _topics.clear()
                            _topics[topic_b] = topic
                        store_ts = _get64(b + p0 + 56)
                        if delay_table_ms is not None and topic == _schedule_topic:
                            tags_code, keys, uniq = _dispatch_props(
                                PyBytes_FromStringAndSize(<const char*>b + pp + 2, end - pp - 2), topic, store_ts,
                                delay_table_ms)
                        elif end - pp - 2 == 0:
                            tags_code, keys, uniq = 0, "", None
                        else:
                            v = _property(b + pp + 2, end - pp - 2, _K_TAGS)
                            tags_code = 0 if v is None else _tags_hash(v)
                            keys = _property(b + pp + 2, end - pp - 2, _K_KEYS)
                            if keys is None:
                                keys = ""
                            uniq = _property(b + pp + 2, end - pp - 2, _K_UNIQ)
                        req = _request(topic, _get32(b + p0 + 12), _get64(b + p0 + 28), total, tags_code, store_ts,
                                       _get64(b + p0 + 20), keys, uniq, sys_flag, _get64(b + p0 + 76), True,
                                       _get64(b + p0 + 40))
            if req is None:
                req = _check_one(buf, p0, lim, check_crc, delay_table_ms, verify_prop_crc)
                if not req.success or req.msg_size < 0:
                    return out, p0, _end_bad
                if req.msg_size == 0:
                    return out, p0, _end_blank
            out.append(req)
            p0 += req.msg_size
            n += 1
        return out, p0, _end_bad if short else _end_limit
    finally:
        PyBuffer_Release(&view)
