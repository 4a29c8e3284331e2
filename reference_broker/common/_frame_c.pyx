# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled twin of the remoting decoder's common case (``FrameDecoder._next_frame`` with a JSON header and
``_decode_json_header``; the format is tabled in remoting/command.py): one complete frame whose header is a
JSON object of the expected types becomes a ``RemotingCommand`` without the pure path's slices, checks and
keyword call.

Everything else — an incomplete length prefix is the only "not yet" it answers itself — returns ``FALLBACK``
with the decoder untouched, and the pure path runs on the same bytes: a bad length, a binary (ROCKETMQ)
header, a header that is not JSON or not an object, a field of an unexpected type or range, a null or
non-string extFields value. So every error a peer can cause is still raised by the pure code, with its text
(tests/common/test_compiled.py holds both paths equal with hypothesis). remoting/codec.py binds the command
class, the JSON parser and the JSON serialize type at import (common must not import remoting)."""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_CheckExact, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_CheckExact, PyDict_GetItem, PyDict_Next
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact
from cpython.object cimport PyObject
from cpython.unicode cimport PyUnicode_CheckExact

FALLBACK = object()  # "the pure path decides": never a frame, never None

cdef object _cls = None
cdef object _loads = None
cdef object _json_type = None
cdef object _default_language = "JAVA"


def bind(command_class, json_loads, json_serialize_type):
    """The command class (a dataclass with slots), the JSON parser the pure path uses, and
    ``SerializeType.JSON``."""
    global _cls, _loads, _json_type
    _cls, _loads, _json_type = command_class, json_loads, json_serialize_type


cdef inline unsigned int _be32(const unsigned char* p):
    return (<unsigned int>p[0] << 24) | (<unsigned int>p[1] << 16) | (<unsigned int>p[2] << 8) | p[3]


cdef bint _int32(dict obj, str key, bint required, long long* out):
    """True with ``*out`` set when ``obj[key]`` is an exact int in int32's range, or absent (0) and not
    ``required``; else False (the pure path decides)."""
    cdef PyObject* v = PyDict_GetItem(obj, key)
    cdef int overflow = 0
    cdef long long x
    if v == NULL or <object>v is None:
        out[0] = 0
        return not required
    if not PyLong_CheckExact(<object>v):
        return False
    x = PyLong_AsLongLongAndOverflow(<object>v, &overflow)
    if overflow or x < -2147483648 or x > 2147483647:
        return False
    out[0] = x
    return True


def next_frame(decoder, Py_ssize_t max_frame):
    """The decoder's next frame as a command, None until 4 bytes of length are there, or ``FALLBACK``.
    ``decoder`` has ``_buf`` (bytearray) and ``_pos``; on success ``_pos`` moves past the frame (the buffer
    is emptied when that was all of it), as the pure path does."""
    cdef object buf = decoder._buf
    cdef Py_ssize_t pos = decoder._pos
    cdef Py_ssize_t size, avail, length, header_len, end
    cdef unsigned int word
    cdef const unsigned char* p
    cdef long long code, version, opaque, flag
    cdef Py_ssize_t i = 0
    cdef PyObject* k
    cdef PyObject* v
    if not PyByteArray_CheckExact(buf):
        return FALLBACK
    size = PyByteArray_GET_SIZE(buf)
    avail = size - pos
    if avail < 4:
        return None
    p = <const unsigned char*>PyByteArray_AS_STRING(buf) + pos
    length = <int>_be32(p)
    if length < 4 or length + 4 > max_frame or avail < 4 + length:
        return FALLBACK  # the pure path raises, or waits for the rest (its length checks come first)
    word = _be32(p + 4)
    header_len = word & 0xFFFFFF
    if (word >> 24) != 0 or header_len > length - 4:
        return FALLBACK
    header = PyBytes_FromStringAndSize(<const char*>p + 8, header_len)
    try:
        obj = _loads(header)
    except Exception:
        return FALLBACK  # not JSON: the pure path raises it as its ProtocolError
    if not PyDict_CheckExact(obj):
        return FALLBACK
    d = <dict>obj
    if not _int32(d, "code", True, &code) or not _int32(d, "version", False, &version) \
            or not _int32(d, "opaque", False, &opaque) or not _int32(d, "flag", False, &flag):
        return FALLBACK
    language = d.get("language")
    if language is None:
        language = _default_language
    elif not PyUnicode_CheckExact(language):
        return FALLBACK
    remark = d.get("remark")
    if remark is not None and not PyUnicode_CheckExact(remark):
        return FALLBACK
    ext = d.get("extFields")
    if ext is None:
        ext = {}
    elif not PyDict_CheckExact(ext):
        return FALLBACK
    else:
        while PyDict_Next(ext, &i, &k, &v):
            if not PyUnicode_CheckExact(<object>v):
                return FALLBACK
    # The body is copied out before the buffer can change (it is ours until the next feed).
    p = <const unsigned char*>PyByteArray_AS_STRING(buf) + pos
    body = PyBytes_FromStringAndSize(<const char*>p + 8 + header_len, length - 4 - header_len)
    cmd = _cls.__new__(_cls)
    # Exactly the fields RemotingCommand.__init__ sets (its slots; __post_init__ only turns a LanguageCode
    # into its name, and the JSON gives a name already).
    cmd.code = code
    cmd.language = language
    cmd.version = version
    cmd.opaque = opaque
    cmd.flag = flag
    cmd.remark = remark
    cmd.ext_fields = ext
    cmd.body = body
    cmd.received_at = 0.0
    cmd.serialize_type = _json_type
    end = pos + 4 + length
    if end == size:
        PyByteArray_Resize(buf, 0)
        decoder._pos = 0
    else:
        decoder._pos = end
    return cmd
