/*
 * Compiled versions of the protocol's hot codecs: Java's String.hashCode, the JSON header's
 * extFields normalization and command construction, the ROCKETMQ binary header, the JSON
 * header writer, the properties string, and the stored record (encode and decode).
 *
 * Each function gives exactly what its pure-Python twin in command.py / message.py gives,
 * errors included: where input is unusual (a value the fast path does not model, a field out
 * of range), the function hands the work to the pure-Python twin (registered through
 * setup()) or returns None so the caller runs it, instead of re-implementing every corner.
 * aiorocketmq.protocol.speedups decides whether this module is used at all.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

/* Registered by setup(): the classes and pure-Python fallbacks of the protocol package. */
static PyObject *ProtocolError = NULL;
static PyObject *RemotingCommand = NULL;   /* class with __slots__ */
static PyObject *MessageExt = NULL;        /* class with __slots__ */
static PyObject *language_names = NULL;    /* dict int -> str */
static PyObject *language_codes = NULL;    /* dict str -> int */
static PyObject *pure_command_from_mapping = NULL;
static PyObject *crc32_func = NULL;        /* zlib.crc32 */
static PyObject *decompress_func = NULL;   /* message.decompress_body */

static PyObject *s_code, *s_language, *s_version, *s_opaque, *s_flag, *s_remark, *s_ext_fields,
    *s_body, *s_serialize_type, *s_extFields, *s_OTHER, *s_true, *s_false;
static PyObject *s_topic, *s_properties, *s_queue_id, *s_queue_offset, *s_commit_log_offset,
    *s_sys_flag, *s_born_timestamp, *s_born_host, *s_store_timestamp, *s_store_host,
    *s_reconsume_times, *s_prepared_transaction_offset, *s_body_crc, *s_store_size,
    *s_broker_name, *s_msg_born_host, *s_msg_store_host;

#define INT32_MIN_ (-2147483647L - 1)
#define INT32_MAX_ 2147483647L

static int
require_setup(void)
{
    if (RemotingCommand == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_speedups: setup_commands() was not called");
        return -1;
    }
    return 0;
}

static int
require_records(void)
{
    if (MessageExt == NULL || ProtocolError == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_speedups: setup_records() was not called");
        return -1;
    }
    return 0;
}

/* The prologue of the vectorcall entry points: the argument count, then the registrations the
 * function needs (require_setup, require_records, or NULL for none). -1 with an exception set. */
static int
check_call(const char *name, Py_ssize_t nargs, Py_ssize_t want, int (*require)(void))
{
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments", name, want);
        return -1;
    }
    return require == NULL ? 0 : require();
}

/* type(obj).__name__ (a new reference), as the pure code words its messages. */
static PyObject *
type_name(PyObject *obj)
{
    return PyType_GetName(Py_TYPE(obj));
}

static void
protocol_error(const char *fmt, ...)
{
    va_list vargs;
    va_start(vargs, fmt);
    PyObject *msg = PyUnicode_FromFormatV(fmt, vargs);
    va_end(vargs);
    if (msg != NULL) {
        PyErr_SetObject(ProtocolError, msg);
        Py_DECREF(msg);
    }
}

/* -- big-endian helpers ----------------------------------------------------------------- */

static inline int32_t
rd_i32(const unsigned char *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

static inline int16_t
rd_i16(const unsigned char *p)
{
    return (int16_t)(((uint16_t)p[0] << 8) | p[1]);
}

static inline int64_t
rd_i64(const unsigned char *p)
{
    return (int64_t)(((uint64_t)(uint32_t)rd_i32(p) << 32) | (uint32_t)rd_i32(p + 4));
}

static inline void
wr_i32(unsigned char *p, int32_t v)
{
    uint32_t u = (uint32_t)v;
    p[0] = (unsigned char)(u >> 24);
    p[1] = (unsigned char)(u >> 16);
    p[2] = (unsigned char)(u >> 8);
    p[3] = (unsigned char)u;
}

static inline void
wr_i16(unsigned char *p, int16_t v)
{
    uint16_t u = (uint16_t)v;
    p[0] = (unsigned char)(u >> 8);
    p[1] = (unsigned char)u;
}

static inline void
wr_i64(unsigned char *p, int64_t v)
{
    wr_i32(p, (int32_t)((uint64_t)v >> 32));
    wr_i32(p + 4, (int32_t)(uint64_t)v);
}

/* A new reference to a slot set by name, through the class's member descriptor. */
static inline int
set_attr(PyObject *obj, PyObject *name, PyObject *value)
{
    return PyObject_GenericSetAttr(obj, name, value);
}

static PyObject *
new_instance(PyObject *cls)
{
    PyTypeObject *tp = (PyTypeObject *)cls;
    return tp->tp_alloc(tp, 0);
}

/* -- java_hash ---------------------------------------------------------------------------- */

static uint32_t java_hash_of(PyObject *text);

static PyObject *
java_hash(PyObject *self, PyObject *text)
{
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "java_hash() takes a str, not %.100s", Py_TYPE(text)->tp_name);
        return NULL;
    }
    return PyLong_FromLong((long)(int32_t)java_hash_of(text));
}

/* -- extFields ---------------------------------------------------------------------------- */

static PyObject *
wire_string(PyObject *value)
{
    if (value == Py_True)
        return Py_NewRef(s_true);
    if (value == Py_False)
        return Py_NewRef(s_false);
    return PyObject_Str(value);
}

static PyObject *
normalize_fields_impl(PyObject *raw)
{
    if (raw == Py_None)
        return PyDict_New();
    if (!PyDict_CheckExact(raw)) {
        PyObject *tn = type_name(raw);
        if (tn != NULL) {
            protocol_error("extFields must be a JSON object, got %U", tn);
            Py_DECREF(tn);
        }
        return NULL;
    }
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    int all_str = 1;
    while (PyDict_Next(raw, &pos, &key, &value)) {
        if (!PyUnicode_CheckExact(value)) {
            all_str = 0;
            break;
        }
    }
    if (all_str)
        return Py_NewRef(raw);
    PyObject *fields = PyDict_New();
    if (fields == NULL)
        return NULL;
    pos = 0;
    while (PyDict_Next(raw, &pos, &key, &value)) {
        if (value == Py_None)
            continue;
        PyObject *text;
        if (PyUnicode_CheckExact(value)) {
            text = Py_NewRef(value);
        }
        else if (PyUnicode_Check(value) || PyLong_Check(value) || PyFloat_Check(value)) {
            text = wire_string(value);
        }
        else {
            PyObject *r = PyObject_Repr(key);
            PyObject *tn = r == NULL ? NULL : type_name(value);
            if (tn != NULL)
                protocol_error("extFields[%U] must be a scalar, got %U", r, tn);
            Py_XDECREF(r);
            Py_XDECREF(tn);
            Py_DECREF(fields);
            return NULL;
        }
        if (text == NULL || PyDict_SetItem(fields, key, text) < 0) {
            Py_XDECREF(text);
            Py_DECREF(fields);
            return NULL;
        }
        Py_DECREF(text);
    }
    return fields;
}

static PyObject *
normalize_fields(PyObject *self, PyObject *raw)
{
    if (require_setup() < 0)
        return NULL;
    return normalize_fields_impl(raw);
}

/* -- commands --------------------------------------------------------------------------- */

static PyObject *
make_command(long code, PyObject *language, long version, long opaque, long flag, PyObject *remark,
             PyObject *fields, PyObject *body, long st)
{
    PyObject *cmd = new_instance(RemotingCommand);
    if (cmd == NULL)
        return NULL;
    PyObject *v;
#define SET_LONG(name, x)                                            \
    v = PyLong_FromLong(x);                                          \
    if (v == NULL || set_attr(cmd, name, v) < 0) {                   \
        Py_XDECREF(v);                                               \
        goto fail;                                                   \
    }                                                                \
    Py_DECREF(v);
    SET_LONG(s_code, code);
    if (set_attr(cmd, s_language, language) < 0)
        goto fail;
    SET_LONG(s_version, version);
    SET_LONG(s_opaque, opaque);
    SET_LONG(s_flag, flag);
    if (set_attr(cmd, s_remark, remark) < 0 || set_attr(cmd, s_ext_fields, fields) < 0 ||
        set_attr(cmd, s_body, body) < 0)
        goto fail;
    SET_LONG(s_serialize_type, st);
#undef SET_LONG
    return cmd;
fail:
    Py_DECREF(cmd);
    return NULL;
}

static int
small_int(PyObject *value, long *out)
{
    if (value == NULL || !PyLong_CheckExact(value))
        return 0;
    int overflow;
    long x = PyLong_AsLongAndOverflow(value, &overflow);
    if (overflow || x < INT32_MIN_ || x > INT32_MAX_)
        return 0;
    *out = x;
    return 1;
}

/* command_from_mapping(header, body, st, kind): the JSON and msgpack headers' command. */
static PyObject *
command_from_mapping(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_call("command_from_mapping", nargs, 4, require_setup) < 0)
        return NULL;
    PyObject *header = args[0], *body = args[1];
    long st = PyLong_AsLong(args[2]);
    if (st == -1 && PyErr_Occurred())
        return NULL;
    long code, opaque = 0, flag = 0, version = 0;
    PyObject *o;
    if (!PyDict_CheckExact(header) || !small_int(PyDict_GetItemWithError(header, s_code), &code) ||
        ((o = PyDict_GetItemWithError(header, s_opaque)) != NULL && !small_int(o, &opaque)) ||
        ((o = PyDict_GetItemWithError(header, s_flag)) != NULL && !small_int(o, &flag)) ||
        ((o = PyDict_GetItemWithError(header, s_version)) != NULL && !small_int(o, &version))) {
        if (PyErr_Occurred())
            return NULL;
        /* Anything but four plain 32-bit ints: the pure code words every error. */
        return PyObject_Vectorcall(pure_command_from_mapping, args, 4, NULL);
    }
    PyObject *remark = PyDict_GetItemWithError(header, s_remark);
    PyObject *language = PyDict_GetItemWithError(header, s_language);
    PyObject *raw = PyDict_GetItemWithError(header, s_extFields);
    if (PyErr_Occurred())
        return NULL;
    if ((remark != NULL && remark != Py_None && !PyUnicode_CheckExact(remark)) ||
        (language != NULL && !PyUnicode_CheckExact(language)))
        return PyObject_Vectorcall(pure_command_from_mapping, args, 4, NULL);
    PyObject *fields;
    if (st == 2) {
        /* msgpack: native values, kept as they are; a falsy extFields is an empty map */
        int truth = raw == NULL ? 0 : PyObject_IsTrue(raw);
        if (truth < 0)
            return NULL;
        if (!truth)
            fields = PyDict_New();
        else if (PyDict_CheckExact(raw))
            fields = Py_NewRef(raw);
        else
            return PyObject_Vectorcall(pure_command_from_mapping, args, 4, NULL);
    }
    else {
        fields = normalize_fields_impl(raw == NULL ? Py_None : raw);
    }
    if (fields == NULL)
        return NULL;
    PyObject *cmd = make_command(code, language == NULL ? s_OTHER : language, version, opaque, flag,
                                 remark == NULL ? Py_None : remark, fields, body, st);
    Py_DECREF(fields);
    return cmd;
}

/* decode_rocketmq_header(data, body) -> RemotingCommand */
static PyObject *
decode_rocketmq_header(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_call("decode_rocketmq_header", nargs, 2, require_setup) < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *d = (const unsigned char *)view.buf;
    Py_ssize_t size = view.len;
    PyObject *remark = NULL, *fields = NULL, *result = NULL;
    if (size < 21) {
        protocol_error("ROCKETMQ header of %zd bytes is shorter than its 21-byte fixed part", size);
        goto done;
    }
    long code = rd_i16(d);
    long language = d[2];
    long version = rd_i16(d + 3);
    long opaque = rd_i32(d + 5);
    long flag = rd_i32(d + 9);
    long remark_len = rd_i32(d + 13);
    Py_ssize_t pos = 17;
    if (remark_len < 0 || pos + remark_len + 4 > size) {
        protocol_error("ROCKETMQ header remark length %ld overruns the header", remark_len);
        goto done;
    }
    if (remark_len) {
        remark = PyUnicode_DecodeUTF8((const char *)d + pos, remark_len, NULL);
        if (remark == NULL)
            goto utf8_error;
    }
    else {
        remark = Py_NewRef(Py_None);
    }
    pos += remark_len;
    long ext_len = rd_i32(d + pos);
    pos += 4;
    if (ext_len < 0 || pos + ext_len != size) {
        protocol_error("ROCKETMQ header extFields length %ld does not match the header size %zd", ext_len,
                       size);
        goto done;
    }
    fields = PyDict_New();
    if (fields == NULL)
        goto done;
    Py_ssize_t end = pos + ext_len;
    while (pos < end) {
        if (pos + 2 > end) {
            protocol_error("ROCKETMQ header extFields entry truncated in its key length");
            goto done;
        }
        long key_len = rd_i16(d + pos);
        pos += 2;
        if (key_len < 0 || pos + key_len + 4 > end) {
            protocol_error("ROCKETMQ header key length %ld overruns extFields", key_len);
            goto done;
        }
        PyObject *key = PyUnicode_DecodeUTF8((const char *)d + pos, key_len, NULL);
        if (key == NULL)
            goto utf8_error;
        pos += key_len;
        long value_len = rd_i32(d + pos);
        pos += 4;
        if (value_len < 0 || pos + value_len > end) {
            Py_DECREF(key);
            protocol_error("ROCKETMQ header value length %ld overruns extFields", value_len);
            goto done;
        }
        if (key_len) {
            PyObject *value = PyUnicode_DecodeUTF8((const char *)d + pos, value_len, NULL);
            if (value == NULL) {
                Py_DECREF(key);
                goto utf8_error;
            }
            int rc = PyDict_SetItem(fields, key, value);
            Py_DECREF(value);
            if (rc < 0) {
                Py_DECREF(key);
                goto done;
            }
        }
        Py_DECREF(key);
        pos += value_len;
    }
    goto build;
utf8_error:
    if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        protocol_error("ROCKETMQ header holds invalid UTF-8: %S", value);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
    }
    goto done;
build: {
    PyObject *lang_key = PyLong_FromLong(language);
    if (lang_key == NULL)
        goto done;
    PyObject *name = PyDict_GetItemWithError(language_names, lang_key);
    Py_DECREF(lang_key);
    if (name == NULL && PyErr_Occurred())
        goto done;
    result = make_command(code, name == NULL ? s_OTHER : name, version, opaque, flag, remark, fields,
                          args[1], 1);
}
done:
    Py_XDECREF(remark);
    Py_XDECREF(fields);
    PyBuffer_Release(&view);
    return result;
}

/* -- header encoders ---------------------------------------------------------------------- */

typedef struct {
    char *buf;
    Py_ssize_t len, cap;
} Out;

static int
out_reserve(Out *o, Py_ssize_t extra)
{
    if (o->len + extra <= o->cap)
        return 0;
    Py_ssize_t cap = o->cap ? o->cap : 256;
    while (cap < o->len + extra)
        cap *= 2;
    char *b = PyMem_Realloc(o->buf, cap);
    if (b == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    o->buf = b;
    o->cap = cap;
    return 0;
}

static inline int
out_write(Out *o, const void *p, Py_ssize_t n)
{
    if (out_reserve(o, n) < 0)
        return -1;
    memcpy(o->buf + o->len, p, n);
    o->len += n;
    return 0;
}

#define OUT_LIT(o, s) out_write((o), (s), (Py_ssize_t)sizeof(s) - 1)

static int
out_long(Out *o, long v)
{
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%ld", v);
    return out_write(o, tmp, n);
}

/* A JSON string as serde_json (pydantic_core.to_json) writes it: UTF-8, with only '"', '\\'
 * and control characters escaped. Returns 1 when the text cannot be written (lone surrogates),
 * with no exception set. */
static int
out_json_string(Out *o, PyObject *text)
{
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(text, &n);
    if (s == NULL) {
        PyErr_Clear();
        return 1;
    }
    if (out_reserve(o, n * 6 + 2) < 0)
        return -1;
    char *w = o->buf + o->len;
    *w++ = '"';
    static const char hex[] = "0123456789abcdef";
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *w++ = (char)c;
            continue;
        }
        *w++ = '\\';
        switch (c) {
        case '"': *w++ = '"'; break;
        case '\\': *w++ = '\\'; break;
        case '\b': *w++ = 'b'; break;
        case '\f': *w++ = 'f'; break;
        case '\n': *w++ = 'n'; break;
        case '\r': *w++ = 'r'; break;
        case '\t': *w++ = 't'; break;
        default:
            *w++ = 'u';
            *w++ = '0';
            *w++ = '0';
            *w++ = hex[c >> 4];
            *w++ = hex[c & 15];
        }
    }
    *w++ = '"';
    o->len = w - o->buf;
    return 0;
}

/* The ext field value as the wire string, or NULL with no exception when the pure code must
 * decide (a value type the fast path does not model). Sets *skip for None. */
static PyObject *
field_text(PyObject *value, int *skip)
{
    *skip = 0;
    if (PyUnicode_CheckExact(value))
        return Py_NewRef(value);
    if (value == Py_None) {
        *skip = 1;
        return NULL;
    }
    if (value == Py_True || value == Py_False || PyLong_CheckExact(value))
        return wire_string(value);
    return NULL;
}

/* The next ext field a header encoder writes, None values skipped: 1 with *key (borrowed) and
 * *text (a new reference), 0 at the end, -1 with an exception set, or -2 when the pure encoder
 * must decide (a key that is not a str, a value type the fast path does not model). */
static int
next_ext_field(PyObject *fields, Py_ssize_t *pos, PyObject **key, PyObject **text)
{
    PyObject *value;
    while (PyDict_Next(fields, pos, key, &value)) {
        int skip;
        if (!PyUnicode_CheckExact(*key))
            return -2;
        *text = field_text(value, &skip);
        if (skip)
            continue;
        if (*text == NULL)
            return PyErr_Occurred() ? -1 : -2;
        return 1;
    }
    return 0;
}

/* A command's int field (an IntEnum such as ResponseCode too, written as its value; a bool is
 * left to the pure encoder, which JSON writes as true/false). 1: out of range or not an int. */
static int
cmd_long(PyObject *cmd, PyObject *name, long lo, long hi, long *out)
{
    PyObject *v = PyObject_GetAttr(cmd, name);
    if (v == NULL)
        return -1;
    int ok = 0;
    if (PyLong_Check(v) && !PyBool_Check(v)) {
        int overflow;
        long x = PyLong_AsLongAndOverflow(v, &overflow);
        if (x == -1 && PyErr_Occurred()) {
            Py_DECREF(v);
            return -1;
        }
        ok = !overflow && x >= lo && x <= hi;
        *out = x;
    }
    Py_DECREF(v);
    return ok ? 0 : 1;
}

/* What both header encoders read from a command. */
typedef struct {
    long code, flag, opaque, version;
    PyObject *fields, *language, *remark; /* new references, or NULL */
} HeaderParts;

/* Fills *h from cmd: code and version within [lo, hi], flag and opaque 32-bit, ext_fields a dict,
 * language a str, remark a str or None. 0 when all are so, 1 when the pure encoder must handle the
 * command, -1 with an exception set; release_header_parts(h) is due in every case. */
static int
header_parts(PyObject *cmd, long lo, long hi, HeaderParts *h)
{
    h->fields = h->language = h->remark = NULL;
    int rc;
    if ((rc = cmd_long(cmd, s_code, lo, hi, &h->code)) ||
        (rc = cmd_long(cmd, s_flag, INT32_MIN_, INT32_MAX_, &h->flag)) ||
        (rc = cmd_long(cmd, s_opaque, INT32_MIN_, INT32_MAX_, &h->opaque)) ||
        (rc = cmd_long(cmd, s_version, lo, hi, &h->version)))
        return rc;
    h->fields = PyObject_GetAttr(cmd, s_ext_fields);
    h->language = PyObject_GetAttr(cmd, s_language);
    h->remark = PyObject_GetAttr(cmd, s_remark);
    if (h->fields == NULL || h->language == NULL || h->remark == NULL)
        return -1;
    if (!PyDict_CheckExact(h->fields) || !PyUnicode_CheckExact(h->language) ||
        (h->remark != Py_None && !PyUnicode_CheckExact(h->remark)))
        return 1;
    return 0;
}

static void
release_header_parts(HeaderParts *h)
{
    Py_CLEAR(h->fields);
    Py_CLEAR(h->language);
    Py_CLEAR(h->remark);
}

/* encode_json_header(cmd) -> bytes, or None for the pure encoder to handle the command. */
static PyObject *
encode_json_header(PyObject *self, PyObject *cmd)
{
    if (require_setup() < 0)
        return NULL;
    HeaderParts h;
    PyObject *result = NULL;
    Out o = {NULL, 0, 0};
    int rc = header_parts(cmd, INT32_MIN_, INT32_MAX_, &h);
    if (rc) {
        if (rc > 0)
            result = Py_NewRef(Py_None);
        goto done;
    }
    if (OUT_LIT(&o, "{\"code\":") < 0 || out_long(&o, h.code) < 0 || OUT_LIT(&o, ",\"extFields\":{") < 0)
        goto done;
    Py_ssize_t pos = 0;
    PyObject *key, *text;
    int got;
    int first = 1;
    while ((got = next_ext_field(h.fields, &pos, &key, &text)) > 0) {
        if (!first && OUT_LIT(&o, ",") < 0) {
            Py_DECREF(text);
            goto done;
        }
        first = 0;
        int r1 = out_json_string(&o, key);
        int r2 = r1 ? r1 : OUT_LIT(&o, ":");
        int r3 = r2 ? r2 : out_json_string(&o, text);
        Py_DECREF(text);
        if (r3) {
            if (r3 > 0)
                result = Py_NewRef(Py_None);
            goto done;
        }
    }
    if (got < 0) {
        if (got == -2)
            result = Py_NewRef(Py_None);
        goto done;
    }
    if (OUT_LIT(&o, "},\"flag\":") < 0 || out_long(&o, h.flag) < 0 || OUT_LIT(&o, ",\"language\":") < 0)
        goto done;
    if ((rc = out_json_string(&o, h.language))) {
        if (rc > 0)
            result = Py_NewRef(Py_None);
        goto done;
    }
    if (OUT_LIT(&o, ",\"opaque\":") < 0 || out_long(&o, h.opaque) < 0)
        goto done;
    if (h.remark != Py_None) {
        if (OUT_LIT(&o, ",\"remark\":") < 0)
            goto done;
        if ((rc = out_json_string(&o, h.remark))) {
            if (rc > 0)
                result = Py_NewRef(Py_None);
            goto done;
        }
    }
    if (OUT_LIT(&o, ",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":") < 0 || out_long(&o, h.version) < 0 ||
        OUT_LIT(&o, "}") < 0)
        goto done;
    result = PyBytes_FromStringAndSize(o.buf, o.len);
done:
    PyMem_Free(o.buf);
    release_header_parts(&h);
    return result;
}

/* encode_rocketmq_header(cmd) -> bytes, or None for the pure encoder to handle the command. */
static PyObject *
encode_rocketmq_header(PyObject *self, PyObject *cmd)
{
    if (require_setup() < 0)
        return NULL;
    HeaderParts h;
    PyObject *result = NULL;
    Out o = {NULL, 0, 0};
    int rc = header_parts(cmd, -32768, 32767, &h);
    if (rc) {
        if (rc > 0)
            result = Py_NewRef(Py_None);
        goto done;
    }
    long lang = -1;
    PyObject *lang_code = PyDict_GetItemWithError(language_codes, h.language);
    if (lang_code == NULL) {
        if (PyErr_Occurred())
            goto done;
        lang_code = PyDict_GetItemWithError(language_codes, s_OTHER);
        if (lang_code == NULL)
            goto done;
    }
    if (!small_int(lang_code, &lang) || lang < 0 || lang > 255) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    const char *remark_s = NULL;
    Py_ssize_t remark_n = 0;
    if (h.remark != Py_None) {
        remark_s = PyUnicode_AsUTF8AndSize(h.remark, &remark_n);
        if (remark_s == NULL) {
            PyErr_Clear();
            result = Py_NewRef(Py_None);
            goto done;
        }
    }
    if (remark_n > INT32_MAX_ || out_reserve(&o, 21 + remark_n) < 0) {
        if (!PyErr_Occurred())
            result = Py_NewRef(Py_None);
        goto done;
    }
    unsigned char *w = (unsigned char *)o.buf;
    wr_i16(w, (int16_t)h.code);
    w[2] = (unsigned char)lang;
    wr_i16(w + 3, (int16_t)h.version);
    wr_i32(w + 5, (int32_t)h.opaque);
    wr_i32(w + 9, (int32_t)h.flag);
    wr_i32(w + 13, (int32_t)remark_n);
    if (remark_n)
        memcpy(w + 17, remark_s, remark_n);
    o.len = 21 + remark_n; /* the ext length at 17 + remark_n is written last */
    Py_ssize_t ext_start = o.len;
    Py_ssize_t pos = 0;
    PyObject *key, *text;
    int got;
    while ((got = next_ext_field(h.fields, &pos, &key, &text)) > 0) {
        Py_ssize_t kn, vn;
        const char *ks = PyUnicode_AsUTF8AndSize(key, &kn);
        const char *vs = ks == NULL ? NULL : PyUnicode_AsUTF8AndSize(text, &vn);
        if (vs == NULL || kn > 32767 || vn > INT32_MAX_) {
            Py_DECREF(text);
            PyErr_Clear();
            result = Py_NewRef(Py_None);
            goto done;
        }
        if (out_reserve(&o, 6 + kn + vn) < 0) {
            Py_DECREF(text);
            goto done;
        }
        w = (unsigned char *)o.buf + o.len;
        wr_i16(w, (int16_t)kn);
        memcpy(w + 2, ks, kn);
        wr_i32(w + 2 + kn, (int32_t)vn);
        memcpy(w + 6 + kn, vs, vn);
        o.len += 6 + kn + vn;
        Py_DECREF(text);
    }
    if (got < 0) {
        if (got == -2)
            result = Py_NewRef(Py_None);
        goto done;
    }
    if (o.len - ext_start > INT32_MAX_) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    wr_i32((unsigned char *)o.buf + ext_start - 4, (int32_t)(o.len - ext_start));
    result = PyBytes_FromStringAndSize(o.buf, o.len);
done:
    PyMem_Free(o.buf);
    release_header_parts(&h);
    return result;
}

/* -- properties --------------------------------------------------------------------------- */

static PyObject *
decode_properties(PyObject *self, PyObject *text)
{
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "decode_properties() takes a str, not %.100s", Py_TYPE(text)->tp_name);
        return NULL;
    }
    PyObject *result = PyDict_New();
    if (result == NULL)
        return NULL;
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t start = 0;
    while (start <= n && n > 0) {
        /* the segment [start, end) and its first \x01 */
        Py_ssize_t end = start, sep = -1;
        while (end < n) {
            Py_UCS4 c = PyUnicode_READ(kind, data, end);
            if (c == 2)
                break;
            if (c == 1 && sep < 0)
                sep = end;
            end++;
        }
        /* Java's string2messageProperties drops a segment whose name or value is empty. */
        if (sep > start && sep + 1 < end) {
            PyObject *name = PyUnicode_Substring(text, start, sep);
            PyObject *value = name == NULL ? NULL : PyUnicode_Substring(text, sep + 1, end);
            if (value == NULL || PyDict_SetItem(result, name, value) < 0) {
                Py_XDECREF(name);
                Py_XDECREF(value);
                Py_DECREF(result);
                return NULL;
            }
            Py_DECREF(name);
            Py_DECREF(value);
        }
        start = end + 1;
    }
    return result;
}

/* -- stored records --------------------------------------------------------------------- */

#define MESSAGE_MAGIC (-626843481)
#define BORN_V6 0x10
#define STORE_V6 0x20
#define COMPRESSED 0x1

/* The StoreMessage class (setup_batch) and its slots' byte offsets in an instance. Readers of a
 * message go to the slot directly when the message is exactly that class and the class is as it
 * was when the offsets were read (its version tag changes when anything on it is reassigned);
 * anything else, subclasses included, is read by attribute. PyObject_GetAttr on a slot was
 * about a seventh of the event loop's time in a batched send. */
static PyObject *StoreMessage = NULL;
static PyObject *s_tags_code, *s_keys, *s_uniq_key;

/* StoreMessage's slots in the order fill_store_message writes them; their byte offsets in an
 * instance are read from the class's member descriptors once, by setup_batch. */
enum {
    SM_TOPIC, SM_QUEUE_ID, SM_BODY, SM_PROPERTIES, SM_FLAG, SM_SYS_FLAG, SM_BORN_TIMESTAMP,
    SM_BORN_HOST, SM_RECONSUME_TIMES, SM_PREPARED_OFFSET, SM_TAGS_CODE, SM_KEYS, SM_UNIQ_KEY,
    SM_STORE_TIMESTAMP, SM_FIELDS
};
static Py_ssize_t store_slot[SM_FIELDS];
static unsigned int store_version = 0;

/* msg.<name> (new reference). */
static inline PyObject *
msg_attr(PyObject *msg, PyObject *name, int field)
{
    if (store_version != 0 && Py_IS_TYPE(msg, (PyTypeObject *)StoreMessage) &&
        ((PyTypeObject *)StoreMessage)->tp_version_tag == store_version) {
        PyObject *v = *(PyObject **)((char *)msg + store_slot[field]);
        if (v != NULL)
            return Py_NewRef(v);
    }
    return PyObject_GetAttr(msg, name);
}

static int
get_long_attr(PyObject *obj, PyObject *name, int field, long long lo, long long hi, long long *out)
{
    PyObject *v = msg_attr(obj, name, field);
    if (v == NULL)
        return -1;
    if (!PyLong_CheckExact(v)) {
        Py_DECREF(v);
        return 1;
    }
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    Py_DECREF(v);
    if (x == -1 && PyErr_Occurred())
        return -1;
    if (overflow || x < lo || x > hi)
        return 1;
    *out = x;
    return 0;
}

/* CRC-32 (IEEE 802.3, zlib's): eight tables, eight bytes a step. Calling zlib.crc32 through
 * Python for every record of a batch cost more than the checksum itself. */
static uint32_t crc_tables[8][256];
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define CRC_CLMUL 1
/* Whether the CPU has PCLMULQDQ and SSE4.1 (crc_init asks once). */
static int crc_clmul = 0;
#endif

static void
crc_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_tables[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int t = 1; t < 8; t++)
            crc_tables[t][n] = (crc_tables[t - 1][n] >> 8) ^ crc_tables[0][crc_tables[t - 1][n] & 0xFF];
#ifdef CRC_CLMUL
    __builtin_cpu_init();
    crc_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
}

#ifdef CRC_CLMUL

/* The CRC state (pre- and post-inverted form, as crc32_bytes keeps it) continued over n bytes,
 * n >= 64 and a multiple of 16: folding 64 bytes at a time with carry-less multiplies, then a
 * Barrett reduction to 32 bits (Intel's "Fast CRC Computation for Generic Polynomials Using
 * PCLMULQDQ", with the bit-reflected constants of the CRC-32 polynomial 0x04C11DB7). Bodies of
 * 1 KiB made the table loop below the largest part of encoding a record: this is about ten
 * times faster. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t
crc32_clmul(uint32_t crc, const unsigned char *p, size_t n)
{
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    const __m128i low32 = _mm_setr_epi32(~0, 0, ~0, 0);
    __m128i x1 = _mm_loadu_si128((const __m128i *)p);
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i x4 = _mm_loadu_si128((const __m128i *)(p + 48));
    __m128i t1, t2, t3, t4;
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    p += 64;
    n -= 64;
    while (n >= 64) {
        t1 = _mm_clmulepi64_si128(x1, k1k2, 0x00);
        t2 = _mm_clmulepi64_si128(x2, k1k2, 0x00);
        t3 = _mm_clmulepi64_si128(x3, k1k2, 0x00);
        t4 = _mm_clmulepi64_si128(x4, k1k2, 0x00);
        x1 = _mm_clmulepi64_si128(x1, k1k2, 0x11);
        x2 = _mm_clmulepi64_si128(x2, k1k2, 0x11);
        x3 = _mm_clmulepi64_si128(x3, k1k2, 0x11);
        x4 = _mm_clmulepi64_si128(x4, k1k2, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, t1), _mm_loadu_si128((const __m128i *)p));
        x2 = _mm_xor_si128(_mm_xor_si128(x2, t2), _mm_loadu_si128((const __m128i *)(p + 16)));
        x3 = _mm_xor_si128(_mm_xor_si128(x3, t3), _mm_loadu_si128((const __m128i *)(p + 32)));
        x4 = _mm_xor_si128(_mm_xor_si128(x4, t4), _mm_loadu_si128((const __m128i *)(p + 48)));
        p += 64;
        n -= 64;
    }
    /* Four lanes into one. */
    t1 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x2), t1);
    t1 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x3), t1);
    t1 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x4), t1);
    while (n >= 16) {
        t1 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
        x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11),
                                         _mm_loadu_si128((const __m128i *)p)), t1);
        p += 16;
        n -= 16;
    }
    /* 128 bits to 64, then the Barrett reduction to 32. */
    x2 = _mm_clmulepi64_si128(x1, k3k4, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, low32), k5, 0x00), x2);
    x2 = _mm_and_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, low32), poly, 0x10), low32);
    x2 = _mm_clmulepi64_si128(x2, poly, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

static uint32_t
crc32_bytes(const unsigned char *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
#ifdef CRC_CLMUL
    if (crc_clmul && n >= 64) {
        size_t chunk = n & ~(size_t)15;
        c = crc32_clmul(c, p, chunk);
        p += chunk;
        n -= chunk;
    }
#endif
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        c = crc_tables[7][lo & 0xFF] ^ crc_tables[6][(lo >> 8) & 0xFF] ^ crc_tables[5][(lo >> 16) & 0xFF] ^
            crc_tables[4][lo >> 24] ^ crc_tables[3][hi & 0xFF] ^ crc_tables[2][(hi >> 8) & 0xFF] ^
            crc_tables[1][(hi >> 16) & 0xFF] ^ crc_tables[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = crc_tables[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static long
crc32_of(PyObject *body)
{
    if (PyBytes_CheckExact(body))
        return (long)crc32_bytes((const unsigned char *)PyBytes_AS_STRING(body), (size_t)PyBytes_GET_SIZE(body));
    PyObject *r = PyObject_CallOneArg(crc32_func, body);
    if (r == NULL)
        return -1;
    long v = PyLong_AsLong(r);
    Py_DECREF(r);
    return v;
}

/* crc32(data) -> zlib.crc32(data): the body checksum the records carry (tests compare it). */
static PyObject *
crc32_py(PyObject *self, PyObject *data)
{
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t c = crc32_bytes((const unsigned char *)view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

/*
 * encode_records(msgs, prefix, queue_offset, now_ms, phys, store_host, max_body)
 *   -> (data, offsets, sizes, stamps, next_queue_offset), an int status code (1: MESSAGE_ILLEGAL,
 *      2: PROPERTIES_SIZE_EXCEEDED), or None for the pure encoder (a field it must judge).
 * The commit log's batch encoder (commit_log.CommitLog._encode): the records of msgs as if
 * written at phys, in one buffer.
 */
static PyObject *
encode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_call("encode_records", nargs, 7, require_records) < 0)
        return NULL;
    PyObject *msgs = args[0], *prefix = args[1], *store_host = args[5];
    long long qoff = PyLong_AsLongLong(args[2]);
    long long now_ms = PyLong_AsLongLong(args[3]);
    long long phys = PyLong_AsLongLong(args[4]);
    long long max_body = PyLong_AsLongLong(args[6]);
    if (PyErr_Occurred())
        return NULL;
    if (!PyList_CheckExact(msgs) && !PyTuple_CheckExact(msgs))
        return Py_NewRef(Py_None);
    if (!PyBytes_CheckExact(prefix) || !PyBytes_CheckExact(store_host))
        return Py_NewRef(Py_None);
    Py_ssize_t store_len = PyBytes_GET_SIZE(store_host);
    if (store_len != 8 && store_len != 20)
        return Py_NewRef(Py_None);
    Py_ssize_t prefix_len = PyBytes_GET_SIZE(prefix);
    /* Reading an attribute may run Python code (a property of a subclass) that changes a
     * list of messages: walk a tuple of them. */
    PyObject *snapshot = PySequence_Tuple(msgs);
    if (snapshot == NULL)
        return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(snapshot);
    PyObject **items = PySequence_Fast_ITEMS(snapshot);
    PyObject *offsets = PyList_New(count), *sizes = PyList_New(count), *stamps = PyList_New(count);
    /* The records of a batch mostly share their size and store time: one int object each for
     * the runs of equal values instead of one per record. */
    PyObject *last_size = NULL, *last_stamp = NULL;
    Py_ssize_t last_size_v = -1;
    long long last_stamp_v = 0;
    PyObject *result = NULL;
    Out o = {NULL, 0, 0};
    if (offsets == NULL || sizes == NULL || stamps == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *msg = items[i];
        PyObject *body = msg_attr(msg, s_body, SM_BODY);
        PyObject *props_s = body == NULL ? NULL : msg_attr(msg, s_properties, SM_PROPERTIES);
        PyObject *born = props_s == NULL ? NULL : msg_attr(msg, s_born_host, SM_BORN_HOST);
        if (born == NULL) {
            Py_XDECREF(body);
            Py_XDECREF(props_s);
            goto done;
        }
        int fallback = !PyBytes_CheckExact(body) || !PyUnicode_CheckExact(props_s) || !PyBytes_CheckExact(born);
        const char *props = NULL;
        Py_ssize_t props_len = 0;
        if (!fallback) {
            props = PyUnicode_AsUTF8AndSize(props_s, &props_len);
            if (props == NULL) {
                PyErr_Clear(); /* lone surrogates: not representable on the wire */
                Py_DECREF(body);
                Py_DECREF(props_s);
                Py_DECREF(born);
                result = PyLong_FromLong(1);
                goto done;
            }
        }
        Py_ssize_t born_len = fallback ? 0 : PyBytes_GET_SIZE(born);
        long status = 0;
        if (!fallback) {
            if (born_len != 8 && born_len != 20)
                status = 1;
            else if (props_len > 32767)
                status = 2;
            else if (PyBytes_GET_SIZE(body) > max_body || memchr(props, 0, props_len) != NULL)
                status = 1;
        }
        long long sys_flag, queue_id, flag, born_ts, store_ts, reconsume, prepared;
        int rc = 0;
        if (!fallback && !status) {
            if ((rc = get_long_attr(msg, s_sys_flag, SM_SYS_FLAG, INT32_MIN_, INT32_MAX_, &sys_flag)) ||
                (rc = get_long_attr(msg, s_queue_id, SM_QUEUE_ID, INT32_MIN_, INT32_MAX_, &queue_id)) ||
                (rc = get_long_attr(msg, s_flag, SM_FLAG, INT32_MIN_, INT32_MAX_, &flag)) ||
                (rc = get_long_attr(msg, s_born_timestamp, SM_BORN_TIMESTAMP, INT64_MIN, INT64_MAX, &born_ts)) ||
                (rc = get_long_attr(msg, s_store_timestamp, SM_STORE_TIMESTAMP, INT64_MIN, INT64_MAX, &store_ts)) ||
                (rc = get_long_attr(msg, s_reconsume_times, SM_RECONSUME_TIMES, INT32_MIN_, INT32_MAX_, &reconsume)) ||
                (rc = get_long_attr(msg, s_prepared_transaction_offset, SM_PREPARED_OFFSET, INT64_MIN, INT64_MAX, &prepared)))
                fallback = 1;
        }
        if (rc < 0 || fallback || status) {
            Py_DECREF(body);
            Py_DECREF(props_s);
            Py_DECREF(born);
            if (rc >= 0)
                result = status ? PyLong_FromLong(status) : Py_NewRef(Py_None);
            goto done;
        }
        Py_ssize_t body_len = PyBytes_GET_SIZE(body);
        Py_ssize_t head_len = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + born_len + 8 + store_len + 4 + 8 + 4;
        Py_ssize_t size = head_len + body_len + prefix_len + 2 + props_len;
        long long host_flags = (born_len == 20 ? BORN_V6 : 0) | (store_len == 20 ? STORE_V6 : 0);
        long long sf = (sys_flag & ~(long long)(BORN_V6 | STORE_V6)) | host_flags;
        long long tx = sf & 0xC;
        long long record_qoff;
        if (tx == 0x4 || tx == 0xC) {
            record_qoff = 0; /* half and rolled-back transaction messages take no queue slot */
        }
        else {
            record_qoff = qoff;
            qoff += 1;
        }
        long long stamp = store_ts ? store_ts : now_ms;
        long crc = crc32_of(body);
        if ((crc == -1 && PyErr_Occurred()) || size > INT32_MAX_ || out_reserve(&o, size) < 0) {
            Py_DECREF(body);
            Py_DECREF(props_s);
            Py_DECREF(born);
            if (!PyErr_Occurred())
                result = Py_NewRef(Py_None);
            goto done;
        }
        unsigned char *w = (unsigned char *)o.buf + o.len;
        wr_i32(w, (int32_t)size);
        wr_i32(w + 4, MESSAGE_MAGIC);
        wr_i32(w + 8, (int32_t)(crc & 0x7FFFFFFF));
        wr_i32(w + 12, (int32_t)queue_id);
        wr_i32(w + 16, (int32_t)flag);
        wr_i64(w + 20, record_qoff);
        wr_i64(w + 28, phys);
        wr_i32(w + 36, (int32_t)sf);
        wr_i64(w + 40, born_ts);
        w += 48;
        memcpy(w, PyBytes_AS_STRING(born), born_len);
        w += born_len;
        wr_i64(w, stamp);
        w += 8;
        memcpy(w, PyBytes_AS_STRING(store_host), store_len);
        w += store_len;
        wr_i32(w, (int32_t)reconsume);
        wr_i64(w + 4, prepared);
        wr_i32(w + 12, (int32_t)body_len);
        w += 16;
        memcpy(w, PyBytes_AS_STRING(body), body_len);
        w += body_len;
        memcpy(w, PyBytes_AS_STRING(prefix), prefix_len);
        w += prefix_len;
        wr_i16(w, (int16_t)props_len);
        memcpy(w + 2, props, props_len);
        o.len += size;
        Py_DECREF(body);
        Py_DECREF(props_s);
        Py_DECREF(born);
        if (last_size == NULL || size != last_size_v) {
            Py_XDECREF(last_size);
            last_size_v = size;
            last_size = PyLong_FromSsize_t(size);
        }
        if (last_stamp == NULL || stamp != last_stamp_v) {
            Py_XDECREF(last_stamp);
            last_stamp_v = stamp;
            last_stamp = PyLong_FromLongLong(stamp);
        }
        PyObject *a = PyLong_FromLongLong(phys);
        if (a == NULL || last_size == NULL || last_stamp == NULL) {
            Py_XDECREF(a);
            goto done;
        }
        PyList_SET_ITEM(offsets, i, a);
        PyList_SET_ITEM(sizes, i, Py_NewRef(last_size));
        PyList_SET_ITEM(stamps, i, Py_NewRef(last_stamp));
        phys += size;
    }
    {
        PyObject *data = PyBytes_FromStringAndSize(o.buf, o.len);
        if (data != NULL)
            result = Py_BuildValue("(NOOOL)", data, offsets, sizes, stamps, qoff);
    }
done:
    PyMem_Free(o.buf);
    Py_XDECREF(last_size);
    Py_XDECREF(last_stamp);
    Py_XDECREF(offsets);
    Py_XDECREF(sizes);
    Py_XDECREF(stamps);
    Py_DECREF(snapshot);
    return result;
}

/*
 * decode_record(buf, pos, check_crc, decompress) -> (MessageExt, end)
 * The pure decode_record's twin: same checks in the same order, same messages.
 */
static PyObject *
decode_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_call("decode_record", nargs, 4, require_records) < 0)
        return NULL;
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred())
        return NULL;
    int check_crc = PyObject_IsTrue(args[2]);
    int decompress = PyObject_IsTrue(args[3]);
    if (check_crc < 0 || decompress < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *d = (const unsigned char *)view.buf;
    Py_ssize_t size = view.len;
    PyObject *result = NULL, *body = NULL, *topic = NULL, *props_text = NULL, *properties = NULL,
             *msg = NULL, *born = NULL, *store = NULL;
    if (pos < 0) {
        /* negative or past-the-end positions: Python's slicing rules decide, in the pure code */
        result = Py_NewRef(Py_None);
        goto done;
    }
    Py_ssize_t available = size - pos;
    if (available < 91) {
        protocol_error("record at %zd truncated: %zd bytes left", pos, available);
        goto done;
    }
    const unsigned char *r = d + pos;
    int32_t sys_flag = rd_i32(r + 36);
    Py_ssize_t born_len = (sys_flag & BORN_V6) ? 20 : 8;
    Py_ssize_t store_len = (sys_flag & STORE_V6) ? 20 : 8;
    Py_ssize_t head_len = 72 + born_len + store_len;
    if (available < head_len + 3) {
        protocol_error("record at %zd truncated: %zd bytes left", pos, available);
        goto done;
    }
    int32_t total = rd_i32(r);
    int32_t magic = rd_i32(r + 4);
    if (magic != MESSAGE_MAGIC) {
        char hex_magic[16];
        snprintf(hex_magic, sizeof hex_magic, "0x%x", (unsigned int)(uint32_t)magic);
        protocol_error("record at %zd has magic code %s, not a message", pos, hex_magic);
        goto done;
    }
    Py_ssize_t end = pos + total;
    const unsigned char *after_born = r + 48 + born_len;
    const unsigned char *after_store = after_born + 8 + store_len;
    int32_t body_len = rd_i32(after_store + 12);
    Py_ssize_t body_pos = pos + head_len;
    Py_ssize_t topic_pos = body_pos + body_len;
    if (end > size || body_len < 0 || topic_pos + 3 > end) {
        protocol_error("record at %zd is truncated or has inconsistent lengths", pos);
        goto done;
    }
    Py_ssize_t topic_len = d[topic_pos];
    Py_ssize_t props_pos = topic_pos + 1 + topic_len;
    if (props_pos + 2 > end || props_pos + 2 + ((d[props_pos] << 8) | d[props_pos + 1]) != end) {
        protocol_error("record at %zd has field lengths that disagree with its size %ld", pos, (long)total);
        goto done;
    }
    int32_t body_crc = rd_i32(r + 8);
    body = PyBytes_FromStringAndSize((const char *)d + body_pos, body_len);
    if (body == NULL)
        goto done;
    if (check_crc) {
        long crc = crc32_of(body);
        if (crc == -1 && PyErr_Occurred())
            goto done;
        if ((crc & 0x7FFFFFFF) != body_crc) {
            protocol_error("record at %zd fails its body CRC check", pos);
            goto done;
        }
    }
    topic = PyUnicode_DecodeUTF8((const char *)d + topic_pos + 1, topic_len, NULL);
    if (topic != NULL)
        props_text = PyUnicode_DecodeUTF8((const char *)d + props_pos + 2, end - props_pos - 2, NULL);
    if (props_text == NULL) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
            PyErr_Clear();
            protocol_error("record at %zd has a topic or properties that is not UTF-8", pos);
        }
        goto done;
    }
    properties = decode_properties(NULL, props_text);
    if (properties == NULL)
        goto done;
    if (decompress && (sys_flag & COMPRESSED)) {
        PyObject *flag_obj = PyLong_FromLong(sys_flag);
        if (flag_obj == NULL)
            goto done;
        PyObject *inflated = PyObject_CallFunctionObjArgs(decompress_func, body, flag_obj, NULL);
        Py_DECREF(flag_obj);
        if (inflated == NULL)
            goto done;
        Py_SETREF(body, inflated);
    }
    born = PyBytes_FromStringAndSize((const char *)r + 48, born_len);
    store = born == NULL ? NULL : PyBytes_FromStringAndSize((const char *)after_born + 8, store_len);
    msg = store == NULL ? NULL : new_instance(MessageExt);
    if (msg == NULL)
        goto done;
    {
        struct {
            PyObject *name;
            PyObject *value;
            int owned;
        } slots[] = {
            {s_topic, topic, 0},
            {s_body, body, 0},
            {s_flag, PyLong_FromLong(rd_i32(r + 16)), 1},
            {s_properties, properties, 0},
            {s_queue_id, PyLong_FromLong(rd_i32(r + 12)), 1},
            {s_queue_offset, PyLong_FromLongLong(rd_i64(r + 20)), 1},
            {s_commit_log_offset, PyLong_FromLongLong(rd_i64(r + 28)), 1},
            {s_sys_flag, PyLong_FromLong(sys_flag), 1},
            {s_born_timestamp, PyLong_FromLongLong(rd_i64(r + 40)), 1},
            {s_msg_born_host, born, 0},
            {s_store_timestamp, PyLong_FromLongLong(rd_i64(after_born)), 1},
            {s_msg_store_host, store, 0},
            {s_reconsume_times, PyLong_FromLong(rd_i32(after_store)), 1},
            {s_prepared_transaction_offset, PyLong_FromLongLong(rd_i64(after_store + 4)), 1},
            {s_body_crc, PyLong_FromLong(body_crc), 1},
            {s_store_size, PyLong_FromLong(total), 1},
            {s_broker_name, Py_None, 0},
        };
        int failed = 0;
        for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++) {
            if (!failed && (slots[i].value == NULL || set_attr(msg, slots[i].name, slots[i].value) < 0))
                failed = 1;
            if (slots[i].owned)
                Py_XDECREF(slots[i].value);
        }
        if (failed)
            goto done;
    }
    {
        PyObject *end_obj = PyLong_FromSsize_t(end);
        if (end_obj != NULL)
            result = PyTuple_Pack(2, msg, end_obj);
        Py_XDECREF(end_obj);
    }
done:
    Py_XDECREF(body);
    Py_XDECREF(topic);
    Py_XDECREF(props_text);
    Py_XDECREF(properties);
    Py_XDECREF(born);
    Py_XDECREF(store);
    Py_XDECREF(msg);
    PyBuffer_Release(&view);
    return result;
}

/* -- index entries ------------------------------------------------------------------------ */

/* Java String.hashCode() continued from h over code points [start, end) of a str's data, each
 * beyond the BMP as the UTF-16 surrogate pair Java holds. */
static uint32_t
java_hash_range(uint32_t h, int kind, const void *data, Py_ssize_t start, Py_ssize_t end)
{
    /* One loop per storage width: the hash runs for every key indexed and every tag. */
    if (kind == PyUnicode_1BYTE_KIND) {
        const Py_UCS1 *s = (const Py_UCS1 *)data;
        for (Py_ssize_t i = start; i < end; i++)
            h = 31 * h + s[i];
    }
    else if (kind == PyUnicode_2BYTE_KIND) {
        const Py_UCS2 *s = (const Py_UCS2 *)data;
        for (Py_ssize_t i = start; i < end; i++)
            h = 31 * h + s[i];
    }
    else {
        const Py_UCS4 *s = (const Py_UCS4 *)data;
        for (Py_ssize_t i = start; i < end; i++) {
            Py_UCS4 c = s[i];
            if (c > 0xFFFF) {
                c -= 0x10000;
                h = 31 * h + (0xD800 + (c >> 10));
                h = 31 * h + (0xDC00 + (c & 0x3FF));
            }
            else {
                h = 31 * h + c;
            }
        }
    }
    return h;
}

/* Java String.hashCode() of the text that follows one whose hash is h. */
static uint32_t
java_hash_from(uint32_t h, PyObject *text)
{
    return java_hash_range(h, PyUnicode_KIND(text), PyUnicode_DATA(text), 0, PyUnicode_GET_LENGTH(text));
}

static uint32_t
java_hash_of(PyObject *text)
{
    return java_hash_from(0, text);
}

/* The state of an index file while entries go in (IndexFile's header fields). */
typedef struct {
    unsigned char *d;
    long long entries; /* where the entries start: the header and the slots before them */
    long long slot_num, count, begin, used, phy, stamp, new_begin_phy, new_begin_ts;
    int begin_set;
} IndexWrite;

/* One entry: key hash, commit-log offset and store time, chained to its slot's last entry. */
static void
index_write_entry(IndexWrite *w, int32_t hs, long long phy, long long stamp)
{
    long long h = hs;
    if (h < 0) /* Java: Math.abs, and 0 for Integer.MIN_VALUE */
        h = h == INT32_MIN_ ? 0 : -h;
    long long slot_pos = 40 + (h % w->slot_num) * 4;
    long long prev = rd_i32(w->d + slot_pos);
    if (prev <= 0 || prev > w->count) {
        prev = 0;
        w->used += 1;
    }
    long long diff;
    if (w->begin <= 0) {
        diff = 0;
        if (w->count <= 1) {
            w->new_begin_phy = phy;
            w->new_begin_ts = w->begin = stamp;
            w->begin_set = 1;
        }
    }
    else if (stamp <= w->begin) {
        diff = 0;
    }
    else {
        diff = (stamp - w->begin) / 1000;
        if (diff > INT32_MAX_)
            diff = INT32_MAX_;
    }
    unsigned char *e = w->d + w->entries + w->count * 20;
    wr_i32(e, (int32_t)h);
    wr_i64(e + 4, phy);
    wr_i32(e + 12, (int32_t)diff);
    wr_i32(e + 16, (int32_t)prev);
    wr_i32(w->d + slot_pos, (int32_t)w->count);
    w->count += 1;
    w->phy = phy;
    w->stamp = stamp;
}

/* index_put_many's and index_build_batch's answer: what the file's header fields become. */
static PyObject *
index_result(Py_ssize_t done, IndexWrite *w)
{
    if (w->begin_set)
        return Py_BuildValue("(nLLLLL)", done, w->used, w->new_begin_phy, w->new_begin_ts, w->phy, w->stamp);
    return Py_BuildValue("(nLOLLL)", done, w->used, Py_None, w->begin, w->phy, w->stamp);
}

/*
 * index_put_many(view, items, start, count, index_num, slot_num, begin_timestamp)
 *   -> (done, used_slots, begin_phy_offset or None, begin_timestamp, end_phy_offset, end_timestamp)
 *   or None for the pure code (an item it must judge, a file too small for its header).
 * The index file's IndexFile.put_many: items[start:] (key, commit-log offset, store time)
 * into the hash slots and entries of the mapped file, until the file is full.
 */
static PyObject *
index_put_many(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_call("index_put_many", nargs, 7, NULL) < 0)
        return NULL;
    PyObject *items = args[1];
    long long numbers[5];
    for (int i = 0; i < 5; i++) {
        int overflow = 0;
        if (!PyLong_Check(args[2 + i]))
            Py_RETURN_NONE;
        numbers[i] = PyLong_AsLongLongAndOverflow(args[2 + i], &overflow);
        if (numbers[i] == -1 && PyErr_Occurred())
            return NULL;
        if (overflow) /* a header field beyond 64 bits: the pure code decides */
            Py_RETURN_NONE;
    }
    Py_ssize_t start = (Py_ssize_t)numbers[0];
    long long count = numbers[1], index_num = numbers[2], slot_num = numbers[3], begin = numbers[4];
    if (!(PyList_CheckExact(items) || PyTuple_CheckExact(items)) || start < 0 || slot_num <= 0 || count < 0 ||
        count > INT32_MAX_)
        Py_RETURN_NONE;
    Py_ssize_t n_items = PySequence_Fast_GET_SIZE(items);
    PyObject **all = PySequence_Fast_ITEMS(items);
    long long room = index_num - count;
    if (room <= 0)
        return Py_BuildValue("(iiOLLL)", 0, 0, Py_None, begin, 0LL, 0LL);
    Py_ssize_t stop = start + room < n_items ? (Py_ssize_t)(start + room) : n_items;
    if (start > n_items)
        stop = start;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0)
        return NULL;
    unsigned char *d = (unsigned char *)view.buf;
    long long entries = 40 + slot_num * 4;
    /* Every item checked first, so that the pure code, when it has to decide, starts from
     * an untouched file. */
    for (Py_ssize_t i = start; i < stop; i++) {
        PyObject *item = all[i];
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 3 || !PyUnicode_CheckExact(PyTuple_GET_ITEM(item, 0)) ||
            !PyLong_CheckExact(PyTuple_GET_ITEM(item, 1)) || !PyLong_CheckExact(PyTuple_GET_ITEM(item, 2)))
            goto fallback;
        int overflow;
        PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(item, 1), &overflow);
        if (overflow)
            goto fallback;
        PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(item, 2), &overflow);
        if (overflow)
            goto fallback;
    }
    if (entries + (count + (stop - start)) * 20 > view.len)
        goto fallback;
    IndexWrite w = {d, entries, slot_num, count, begin, 0, 0, 0, 0, 0, 0};
    for (Py_ssize_t i = start; i < stop; i++) {
        PyObject *item = all[i];
        index_write_entry(&w, (int32_t)java_hash_of(PyTuple_GET_ITEM(item, 0)),
                          PyLong_AsLongLong(PyTuple_GET_ITEM(item, 1)), PyLong_AsLongLong(PyTuple_GET_ITEM(item, 2)));
    }
    PyBuffer_Release(&view);
    return index_result(stop - start, &w);
fallback:
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

/* -- frame splitting ------------------------------------------------------------------------ */

/*
 * split_frames(data, max_frame, decoders) -> (commands, consumed, error)
 * The general loop of FrameDecoder.feed: every whole frame of data decoded by the decoder of
 * its serialize type (decoders: dict type -> callable(header, body)), the bytes consumed, and
 * the ProtocolError that stopped it (None if none). The checks and messages are the pure
 * loop's, in its order; an exception other than ProtocolError propagates, as there.
 */
static PyObject *
split_frames(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_call("split_frames", nargs, 3, require_setup) < 0)
        return NULL;
    long long max_frame = PyLong_AsLongLong(args[1]);
    if (max_frame == -1 && PyErr_Occurred())
        return NULL;
    PyObject *decoders = args[2];
    if (!PyDict_Check(decoders)) {
        PyErr_SetString(PyExc_TypeError, "split_frames() needs a dict of decoders");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *d = (const unsigned char *)view.buf;
    Py_ssize_t size = view.len, pos = 0;
    PyObject *commands = PyList_New(0), *error = NULL, *result = NULL;
    if (commands == NULL)
        goto done;
    while (size - pos >= 8) {
        long long total = rd_i32(d + pos);
        uint32_t word = (uint32_t)rd_i32(d + pos + 4);
        if (total < 4 || total > max_frame) {
            protocol_error("frame length %lld is outside the allowed range 4..%lld", total, max_frame);
            goto protocol_failure;
        }
        long long header_len = word & 0xFFFFFF;
        if (header_len > total - 4) {
            protocol_error("header length %lld exceeds the frame's %lld remaining bytes", header_len, total - 4);
            goto protocol_failure;
        }
        PyObject *type_obj = PyLong_FromUnsignedLong(word >> 24);
        if (type_obj == NULL)
            goto done;
        PyObject *decoder = PyDict_GetItemWithError(decoders, type_obj);
        Py_DECREF(type_obj);
        if (decoder == NULL) {
            if (PyErr_Occurred())
                goto done;
            protocol_error("unknown serialize type %lu", (unsigned long)(word >> 24));
            goto protocol_failure;
        }
        Py_ssize_t end = pos + 4 + (Py_ssize_t)total;
        if (end > size)
            break;
        Py_ssize_t header_end = pos + 8 + (Py_ssize_t)header_len;
        PyObject *parts[2];
        parts[0] = PyBytes_FromStringAndSize((const char *)d + pos + 8, (Py_ssize_t)header_len);
        parts[1] = parts[0] == NULL ? NULL : PyBytes_FromStringAndSize((const char *)d + header_end, end - header_end);
        if (parts[1] == NULL) {
            Py_XDECREF(parts[0]);
            goto done;
        }
        Py_INCREF(decoder); /* the dict could change under a decoder */
        PyObject *cmd = PyObject_Vectorcall(decoder, parts, 2, NULL);
        Py_DECREF(decoder);
        Py_DECREF(parts[0]);
        Py_DECREF(parts[1]);
        if (cmd == NULL) {
            if (PyErr_ExceptionMatches(ProtocolError))
                goto protocol_failure;
            goto done;
        }
        int rc = PyList_Append(commands, cmd);
        Py_DECREF(cmd);
        if (rc < 0)
            goto done;
        pos = end;
    }
    if (size - pos >= 4) {
        /* an oversized frame is refused as soon as its length is known */
        long long total = rd_i32(d + pos);
        if (total < 4 || total > max_frame) {
            protocol_error("frame length %lld is outside the allowed range 4..%lld", total, max_frame);
            goto protocol_failure;
        }
    }
    error = Py_NewRef(Py_None);
    goto build;
protocol_failure: {
    PyObject *type, *tb;
    PyErr_Fetch(&type, &error, &tb);
    PyErr_NormalizeException(&type, &error, &tb);
    if (error != NULL && tb != NULL)
        PyException_SetTraceback(error, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    if (error == NULL)
        goto done;
}
build:
    result = Py_BuildValue("(OnO)", commands, pos, error);
done:
    Py_XDECREF(commands);
    Py_XDECREF(error);
    PyBuffer_Release(&view);
    return result;
}

/* -- setup ---------------------------------------------------------------------------------- */

static PyObject *
setup_commands(PyObject *self, PyObject *args)
{
    PyObject *err, *cmd_cls, *names, *codes, *pure_cfm;
    if (!PyArg_ParseTuple(args, "OOO!O!O:setup_commands", &err, &cmd_cls, &PyDict_Type, &names, &PyDict_Type,
                          &codes, &pure_cfm))
        return NULL;
    if (!PyType_Check(cmd_cls)) {
        PyErr_SetString(PyExc_TypeError, "setup_commands() needs the RemotingCommand class");
        return NULL;
    }
    Py_XSETREF(RemotingCommand, Py_NewRef(cmd_cls));
    Py_XSETREF(language_names, Py_NewRef(names));
    Py_XSETREF(language_codes, Py_NewRef(codes));
    Py_XSETREF(pure_command_from_mapping, Py_NewRef(pure_cfm));
    Py_XSETREF(ProtocolError, Py_NewRef(err));
    Py_RETURN_NONE;
}

static PyObject *
setup_records(PyObject *self, PyObject *args)
{
    PyObject *err, *ext_cls, *crc, *decomp;
    if (!PyArg_ParseTuple(args, "OOOO:setup_records", &err, &ext_cls, &crc, &decomp))
        return NULL;
    if (!PyType_Check(ext_cls)) {
        PyErr_SetString(PyExc_TypeError, "setup_records() needs the MessageExt class");
        return NULL;
    }
    Py_XSETREF(crc32_func, Py_NewRef(crc));
    Py_XSETREF(decompress_func, Py_NewRef(decomp));
    Py_XSETREF(ProtocolError, Py_NewRef(err));
    Py_XSETREF(MessageExt, Py_NewRef(ext_cls));
    Py_RETURN_NONE;
}

/* ---- ACL signing content ------------------------------------------------------------------
 * acl_field_values(fields: dict, skip) -> bytes: the string values of ``fields`` in key order,
 * but the keys in ``skip`` and None values, UTF-8 encoded (protocol/acl.py's _field_values):
 * str values as they are, True/False as "true"/"false", anything else as str(value). */

static PyObject *
acl_field_values(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyDict_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "acl_field_values(fields: dict, skip)");
        return NULL;
    }
    PyObject *fields = args[0], *skip = args[1];
    PyObject *keys = PyDict_Keys(fields);
    if (keys == NULL)
        return NULL;
    PyObject *parts = NULL, *joined = NULL, *result = NULL;
    if (PyList_Sort(keys) < 0)
        goto done;
    Py_ssize_t n = PyList_GET_SIZE(keys);
    parts = PyList_New(0);
    if (parts == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PyList_GET_ITEM(keys, i);
        /* skip is asked first: its lookup may run Python code (a key's __eq__), and nothing
         * may run between borrowing the value and converting it. */
        int skipped = PySequence_Contains(skip, key);
        if (skipped < 0)
            goto done;
        if (skipped)
            continue;
        PyObject *value = PyDict_GetItemWithError(fields, key);  /* borrowed */
        if (value == NULL) {
            if (PyErr_Occurred())
                goto done;
            continue;
        }
        if (value == Py_None)
            continue;
        PyObject *text;
        if (PyUnicode_CheckExact(value))
            text = Py_NewRef(value);
        else if (value == Py_True)
            text = PyUnicode_FromString("true");
        else if (value == Py_False)
            text = PyUnicode_FromString("false");
        else
            text = PyObject_Str(value);
        if (text == NULL)
            goto done;
        int appended = PyList_Append(parts, text);
        Py_DECREF(text);
        if (appended < 0)
            goto done;
    }
    {
        PyObject *empty = PyUnicode_FromStringAndSize("", 0);
        if (empty == NULL)
            goto done;
        joined = PyUnicode_Join(empty, parts);
        Py_DECREF(empty);
    }
    if (joined != NULL)
        result = PyUnicode_AsUTF8String(joined);
done:
    Py_DECREF(keys);
    Py_XDECREF(parts);
    Py_XDECREF(joined);
    return result;
}

/* ---- batch bodies into store messages -------------------------------------------------------
 * store_batch(data, topic, queue_id, extra, sys_flag, born_timestamp, born_host)
 *   -> (messages, wait) or an int refusal (1: delay level, 2: delivery time, 3: properties too
 *   large); raises ProtocolError for a malformed body. broker/batch.py's store_batch_pure, in one
 *   pass: the entries are split, their properties scanned as UTF-8 bytes (the separators \x01 and
 *   \x02 never occur inside a multi-byte character) and each StoreMessage filled slot by slot. */

static PyObject *batch_keys = NULL; /* (tags, keys, uniq, delay, wait, *timer keys) as str */
static Py_ssize_t batch_max_props = 0;

static int
find_slots(PyObject *cls)
{
    PyObject *names[SM_FIELDS] = {
        s_topic, s_queue_id, s_body, s_properties, s_flag, s_sys_flag, s_born_timestamp, s_born_host,
        s_reconsume_times, s_prepared_transaction_offset, s_tags_code, s_keys, s_uniq_key, s_store_timestamp,
    };
    Py_ssize_t found[SM_FIELDS]; /* copied in only once every name is a slot of this class */
    for (int i = 0; i < SM_FIELDS; i++) {
        PyObject *descr = PyObject_GetAttr(cls, names[i]);
        if (descr == NULL)
            return -1;
        int ok = Py_IS_TYPE(descr, &PyMemberDescr_Type) &&
                 PyObject_TypeCheck(cls, &PyType_Type) &&
                 PyType_IsSubtype((PyTypeObject *)cls, PyDescr_TYPE(descr)) &&
                 ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX;
        if (ok)
            found[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
        Py_DECREF(descr);
        if (!ok) {
            PyErr_Format(PyExc_TypeError, "setup_batch(): %U is not a slot of the class", names[i]);
            return -1;
        }
    }
    memcpy(store_slot, found, sizeof found);
    /* The lookups above gave the class a version tag (0 if none could be had: no fast path);
     * reassigning anything on the class changes it. */
    store_version = ((PyTypeObject *)cls)->tp_version_tag;
    return 0;
}

/* Set a slot of a fresh instance (empty until now), taking the reference. */
static inline void
put_slot(PyObject *obj, int field, PyObject *value)
{
    PyObject **slot = (PyObject **)((char *)obj + store_slot[field]);
    Py_XSETREF(*slot, value);
}

enum { BK_TAGS, BK_KEYS, BK_UNIQ, BK_DELAY, BK_WAIT, BK_TIMER };

static PyObject *
setup_batch(PyObject *self, PyObject *args)
{
    PyObject *cls, *tags, *keys, *uniq, *delay, *wait, *timers;
    Py_ssize_t max_props;
    if (!PyArg_ParseTuple(args, "OUUUUUO!n:setup_batch", &cls, &tags, &keys, &uniq, &delay, &wait,
                          &PyTuple_Type, &timers, &max_props))
        return NULL;
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "setup_batch() needs the StoreMessage class");
        return NULL;
    }
    PyObject *head = PyTuple_Pack(5, tags, keys, uniq, delay, wait);
    if (head == NULL)
        return NULL;
    PyObject *all = PySequence_Concat(head, timers);
    Py_DECREF(head);
    if (all == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(all); i++) {
        if (!PyUnicode_Check(PyTuple_GET_ITEM(all, i)) || PyUnicode_AsUTF8(PyTuple_GET_ITEM(all, i)) == NULL) {
            Py_DECREF(all);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "setup_batch() property names must be str");
            return NULL;
        }
    }
    if (find_slots(cls) < 0) {
        Py_DECREF(all);
        return NULL;
    }
    Py_XSETREF(StoreMessage, Py_NewRef(cls));
    Py_XSETREF(batch_keys, all);
    batch_max_props = max_props;
    Py_RETURN_NONE;
}

typedef struct {
    const char *value;
    Py_ssize_t size;
} prop_value;

/* The last non-empty value of each property batch_keys names, as decode_properties keeps it;
 * returns whether any delivery-time property is present. */
static int
scan_properties(const char *p, Py_ssize_t n, prop_value found[BK_TIMER])
{
    int timer = 0;
    Py_ssize_t nkeys = PyTuple_GET_SIZE(batch_keys);
    Py_ssize_t start = 0;
    while (start < n) {
        Py_ssize_t end = start, sep = -1;
        while (end < n && p[end] != 2) {
            if (p[end] == 1 && sep < 0)
                sep = end;
            end++;
        }
        if (sep > start && sep + 1 < end) {
            Py_ssize_t name_len = sep - start;
            for (Py_ssize_t k = 0; k < nkeys; k++) {
                Py_ssize_t key_len;
                const char *key = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(batch_keys, k), &key_len);
                if (key_len == name_len && memcmp(key, p + start, name_len) == 0) {
                    if (k >= BK_TIMER)
                        timer = 1;
                    else {
                        found[k].value = p + sep + 1;
                        found[k].size = end - sep - 1;
                    }
                    break;
                }
            }
        }
        start = end + 1;
    }
    return timer;
}

static PyObject *
optional_str(const prop_value *v)
{
    if (v->value == NULL)
        Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8(v->value, v->size, "strict");
}

static int
fill_store_message(PyObject *msg, PyObject *const *args, PyObject *body, PyObject *props, long flag,
                   const prop_value found[BK_TIMER])
{
    PyObject *tags_code, *keys, *uniq, *flag_obj;
    if (found[BK_TAGS].value != NULL) {
        PyObject *tags = optional_str(&found[BK_TAGS]);
        if (tags == NULL)
            return -1;
        tags_code = PyLong_FromLong((long)(int32_t)java_hash_of(tags));
        Py_DECREF(tags);
    }
    else
        tags_code = PyLong_FromLong(0);
    if (tags_code == NULL)
        return -1;
    put_slot(msg, SM_TAGS_CODE, tags_code);
    if ((keys = optional_str(&found[BK_KEYS])) == NULL)
        return -1;
    put_slot(msg, SM_KEYS, keys);
    if ((uniq = optional_str(&found[BK_UNIQ])) == NULL)
        return -1;
    put_slot(msg, SM_UNIQ_KEY, uniq);
    if ((flag_obj = PyLong_FromLong(flag)) == NULL)
        return -1;
    put_slot(msg, SM_FLAG, flag_obj);
    put_slot(msg, SM_TOPIC, Py_NewRef(args[1]));
    put_slot(msg, SM_QUEUE_ID, Py_NewRef(args[2]));
    put_slot(msg, SM_BODY, Py_NewRef(body));
    put_slot(msg, SM_PROPERTIES, Py_NewRef(props));
    put_slot(msg, SM_SYS_FLAG, Py_NewRef(args[4]));
    put_slot(msg, SM_BORN_TIMESTAMP, Py_NewRef(args[5]));
    put_slot(msg, SM_BORN_HOST, Py_NewRef(args[6]));
    put_slot(msg, SM_RECONSUME_TIMES, PyLong_FromLong(0));
    put_slot(msg, SM_PREPARED_OFFSET, PyLong_FromLong(0));
    put_slot(msg, SM_STORE_TIMESTAMP, PyLong_FromLong(0));
    return 0;
}

static PyObject *
store_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (StoreMessage == NULL || ProtocolError == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_speedups: setup_batch() and setup_records() were not called");
        return NULL;
    }
    if (nargs != 7 || !PyUnicode_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError,
                        "store_batch(data, topic, queue_id, extra: str, sys_flag, born_timestamp, born_host)");
        return NULL;
    }
    Py_ssize_t extra_len;
    const char *extra = PyUnicode_AsUTF8AndSize(args[3], &extra_len);
    if (extra == NULL)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *data = view.buf;
    Py_ssize_t size = view.len, pos = 0;
    PyObject *messages = PyList_New(0);
    Out joined = {NULL, 0, 0};
    int refusal = 0, wait = 1;
    if (messages == NULL)
        goto fail;
    while (pos < size) {
        if (size - pos < 20) {
            protocol_error("batch entry at %zd truncated in its header", pos);
            goto fail;
        }
        long flag = rd_i32(data + pos + 12);
        long body_len = rd_i32(data + pos + 16);
        Py_ssize_t body_pos = pos + 20;
        if (body_len < 0 || body_pos + body_len + 2 > size) {
            protocol_error("batch entry at %zd has body length %ld beyond the batch", pos, body_len);
            goto fail;
        }
        Py_ssize_t props_pos = body_pos + body_len + 2;
        long props_len = rd_i16(data + props_pos - 2);
        if (props_len < 0 || props_pos + props_len > size) {
            protocol_error("batch entry at %zd has properties length %ld beyond the batch", pos, props_len);
            goto fail;
        }
        const char *raw = (const char *)data + props_pos;
        /* The stored properties: the entry's own, a separator unless they end with one, extra. */
        int sep = props_len > 0 && raw[props_len - 1] != 2;
        joined.len = 0;
        if (out_write(&joined, raw, props_len) < 0 || (sep && OUT_LIT(&joined, "\x02") < 0) ||
            out_write(&joined, extra, extra_len) < 0)
            goto fail;
        PyObject *props = PyUnicode_DecodeUTF8(joined.buf, joined.len, "strict");
        if (props == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                goto fail;
            PyErr_Clear();
            protocol_error("batch entry at %zd has properties that are not UTF-8", pos);
            goto fail;
        }
        if (!refusal) {
            prop_value found[BK_TIMER] = {{NULL, 0}};
            int timer = scan_properties(raw, props_len, found);
            if (found[BK_DELAY].value != NULL && !(found[BK_DELAY].size == 1 && found[BK_DELAY].value[0] == '0'))
                refusal = 1;
            else if (timer)
                refusal = 2;
            else {
                if (found[BK_WAIT].size == 5 && memcmp(found[BK_WAIT].value, "false", 5) == 0)
                    wait = 0;
                if (PyUnicode_GET_LENGTH(props) > batch_max_props)
                    refusal = 3;
            }
            if (!refusal) {
                PyObject *body = PyBytes_FromStringAndSize((const char *)data + body_pos, body_len);
                PyObject *msg = body == NULL ? NULL : new_instance(StoreMessage);
                if (msg == NULL || fill_store_message(msg, args, body, props, flag, found) < 0 ||
                    PyList_Append(messages, msg) < 0) {
                    Py_XDECREF(body);
                    Py_XDECREF(msg);
                    Py_DECREF(props);
                    goto fail;
                }
                Py_DECREF(body);
                /* Its slots hold str, bytes, ints and None only, so it can be in no reference
                 * cycle: left to the collector, the 32 messages of each batch were a third of
                 * the tracked objects allocated per request, and so of its young-generation
                 * collections (a later assignment of a container to a slot would only
                 * keep a cycle alive, never break anything). */
                if (Py_IS_TYPE(msg, (PyTypeObject *)StoreMessage) && PyObject_GC_IsTracked(msg))
                    PyObject_GC_UnTrack(msg);
                Py_DECREF(msg);
            }
        }
        Py_DECREF(props);
        pos = props_pos + props_len;
    }
    PyMem_Free(joined.buf);
    PyBuffer_Release(&view);
    if (refusal) {
        Py_DECREF(messages);
        return PyLong_FromLong(refusal);
    }
    PyObject *result = Py_BuildValue("(NO)", messages, wait ? Py_True : Py_False);
    return result;
fail:
    PyMem_Free(joined.buf);
    PyBuffer_Release(&view);
    Py_XDECREF(messages);
    return NULL;
}

/* ---- faulting mapped pages in ahead of the writer ---------------------------------------------
 * populate_write(mapping, start, length) -> bool: fault in, writable, the pages of a shared file
 * mapping covering [start, start + length), with the GIL released (MADV_POPULATE_WRITE, Linux
 * 5.14+). The commit log calls it from its io thread for the pages it will write next, so the
 * event loop's copies into the mapping do not take the page faults. False where the kernel does
 * not support it (the caller stops asking); the contents are never changed. */

/* -- index entries of a batch ------------------------------------------------------------- */

typedef struct {
    PyObject *uniq; /* a str with characters, or NULL */
    PyObject *keys; /* likewise */
    long long phy, stamp;
} KeyedRecord;

/* How many non-empty keys a KEYS value holds (separated by single spaces, as str.split(" ")). */
static Py_ssize_t
count_keys(PyObject *keys)
{
    int kind = PyUnicode_KIND(keys);
    const void *data = PyUnicode_DATA(keys);
    Py_ssize_t n = PyUnicode_GET_LENGTH(keys), found = 0;
    int in_key = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int sep = PyUnicode_READ(kind, data, i) == ' ';
        if (!sep && !in_key)
            found++;
        in_key = !sep;
    }
    return found;
}

/* A str attribute that holds characters (new reference); NULL with no error for None or "";
 * -1 in *bad for anything else (the pure code decides). */
static PyObject *
key_attr(PyObject *msg, PyObject *name, int field, int *bad)
{
    PyObject *v = msg_attr(msg, name, field);
    if (v == NULL) {
        *bad = -1;
        return NULL;
    }
    if (v == Py_None || (PyUnicode_CheckExact(v) && PyUnicode_GET_LENGTH(v) == 0)) {
        Py_DECREF(v);
        return NULL;
    }
    if (!PyUnicode_CheckExact(v)) {
        Py_DECREF(v);
        *bad = 1;
        return NULL;
    }
    return v;
}

/*
 * index_build_batch(view, topic, msgs, offsets, stamps, end_phy, count, index_num, slot_num, begin)
 *   -> (done, used_slots, begin_phy_offset or None, begin_timestamp, end_phy_offset, end_timestamp)
 *   or None for the pure code (a field it must judge, or keys that do not all fit in the file).
 * Index.build_batch (broker/store/index.py) for one index file: each message's UNIQ_KEY and
 * then each of its KEYS as "topic#key", skipping rolled-back transaction messages and records
 * at or below end_phy (indexed before). The hashes are taken without building the joined
 * strings.
 */
static PyObject *
index_build_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_call("index_build_batch", nargs, 10, NULL) < 0)
        return NULL;
    PyObject *topic = args[1], *msgs = args[2], *offsets = args[3], *stamps = args[4];
    long long numbers[5];
    for (int i = 0; i < 5; i++) {
        int overflow = 0;
        if (!PyLong_CheckExact(args[5 + i]))
            Py_RETURN_NONE;
        numbers[i] = PyLong_AsLongLongAndOverflow(args[5 + i], &overflow);
        if (numbers[i] == -1 && PyErr_Occurred())
            return NULL;
        if (overflow)
            Py_RETURN_NONE;
    }
    long long end_phy = numbers[0], count = numbers[1], index_num = numbers[2], slot_num = numbers[3];
    if (!PyUnicode_CheckExact(topic) || !(PyList_CheckExact(msgs) || PyTuple_CheckExact(msgs)) ||
        !PyList_CheckExact(offsets) || !PyList_CheckExact(stamps) || slot_num <= 0 || count < 0 ||
        count > INT32_MAX_)
        Py_RETURN_NONE;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(msgs);
    if (PyList_GET_SIZE(offsets) != n || PyList_GET_SIZE(stamps) != n)
        Py_RETURN_NONE;
    /* Reading an attribute may run Python code (a property of a subclass) that changes the
     * list: walk a tuple of the messages, and look the offsets up again after each read. */
    PyObject *snapshot = PySequence_Tuple(msgs);
    if (snapshot == NULL)
        return NULL;
    PyObject **items = PySequence_Fast_ITEMS(snapshot);
    KeyedRecord *recs = PyMem_Calloc(n ? n : 1, sizeof(KeyedRecord));
    if (recs == NULL) {
        Py_DECREF(snapshot);
        return PyErr_NoMemory();
    }
    PyObject *result = NULL;
    Py_ssize_t kept = 0, keys_total = 0;
    int bad = 0;
    for (Py_ssize_t i = 0; i < n && !bad; i++) {
        PyObject *msg = items[i];
        PyObject *uniq = key_attr(msg, s_uniq_key, SM_UNIQ_KEY, &bad);
        PyObject *keys = bad ? NULL : key_attr(msg, s_keys, SM_KEYS, &bad);
        if (bad || (uniq == NULL && keys == NULL)) {
            Py_XDECREF(uniq);
            Py_XDECREF(keys);
            continue;
        }
        long long sys_flag, phy, stamp;
        int overflow = 0;
        if ((bad = get_long_attr(msg, s_sys_flag, SM_SYS_FLAG, INT64_MIN, INT64_MAX, &sys_flag)) == 0) {
            PyObject *phy_obj = i < PyList_GET_SIZE(offsets) ? PyList_GET_ITEM(offsets, i) : NULL;
            PyObject *stamp_obj = i < PyList_GET_SIZE(stamps) ? PyList_GET_ITEM(stamps, i) : NULL;
            if (phy_obj == NULL || stamp_obj == NULL || !PyLong_CheckExact(phy_obj) || !PyLong_CheckExact(stamp_obj))
                bad = 1;
            else {
                phy = PyLong_AsLongLongAndOverflow(phy_obj, &overflow);
                if (!overflow)
                    stamp = PyLong_AsLongLongAndOverflow(stamp_obj, &overflow);
                if (overflow)
                    bad = 1;
            }
        }
        if (bad || (sys_flag & 0xC) == 0xC || phy <= end_phy) {
            Py_XDECREF(uniq);
            Py_XDECREF(keys);
            continue;
        }
        recs[kept] = (KeyedRecord){uniq, keys, phy, stamp};
        kept++;
        keys_total += (uniq != NULL) + (keys != NULL ? count_keys(keys) : 0);
    }
    if (bad < 0)
        goto done;
    if (bad || count + keys_total > index_num) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    {
        Py_buffer view;
        if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0)
            goto done;
        long long entries = 40 + slot_num * 4;
        if (entries + (count + keys_total) * 20 > view.len) {
            PyBuffer_Release(&view);
            result = Py_NewRef(Py_None);
            goto done;
        }
        uint32_t base = 31 * java_hash_of(topic) + '#';
        IndexWrite w = {(unsigned char *)view.buf, entries, slot_num, count, numbers[4], 0, 0, 0, 0, 0, 0};
        for (Py_ssize_t i = 0; i < kept; i++) {
            KeyedRecord *r = &recs[i];
            if (r->uniq != NULL)
                index_write_entry(&w, (int32_t)java_hash_from(base, r->uniq), r->phy, r->stamp);
            if (r->keys != NULL) {
                int kind = PyUnicode_KIND(r->keys);
                const void *data = PyUnicode_DATA(r->keys);
                Py_ssize_t len = PyUnicode_GET_LENGTH(r->keys), start = 0;
                for (Py_ssize_t j = 0; j <= len; j++) {
                    if (j < len && PyUnicode_READ(kind, data, j) != ' ')
                        continue;
                    if (j > start)
                        index_write_entry(&w, (int32_t)java_hash_range(base, kind, data, start, j), r->phy,
                                          r->stamp);
                    start = j + 1;
                }
            }
        }
        PyBuffer_Release(&view);
        result = index_result(keys_total, &w);
    }
done:
    for (Py_ssize_t i = 0; i < kept; i++) {
        Py_XDECREF(recs[i].uniq);
        Py_XDECREF(recs[i].keys);
    }
    PyMem_Free(recs);
    Py_DECREF(snapshot);
    return result;
}

/*
 * cq_put_entries(view, pos, offsets, sizes, tags_codes) -> the position after them, or None for
 * the pure code (a value it must judge). Consume-queue entries (commit-log offset, size, tags
 * code; 20 bytes each, big-endian) for consecutive queue offsets, written from pos.
 */
static PyObject *
cq_put_entries(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_call("cq_put_entries", nargs, 5, NULL) < 0)
        return NULL;
    PyObject *offsets = args[2], *sizes = args[3], *codes = args[4];
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred())
        return NULL;
    if (!PyList_CheckExact(offsets) || !PyList_CheckExact(sizes) || !PyList_CheckExact(codes))
        Py_RETURN_NONE;
    Py_ssize_t n = PyList_GET_SIZE(offsets);
    if (PyList_GET_SIZE(sizes) != n || PyList_GET_SIZE(codes) != n || pos < 0)
        Py_RETURN_NONE;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0)
        return NULL;
    if (pos + n * 20 > view.len)
        goto fallback;
    /* Every value checked before the first byte is written, so a fallback finds the file as it was. */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyList_GET_ITEM(offsets, i), *b = PyList_GET_ITEM(sizes, i), *c = PyList_GET_ITEM(codes, i);
        int o1 = 0, o2 = 0, o3 = 0;
        if (!PyLong_CheckExact(a) || !PyLong_CheckExact(b) || !PyLong_CheckExact(c))
            goto fallback;
        PyLong_AsLongLongAndOverflow(a, &o1);
        long long size = PyLong_AsLongLongAndOverflow(b, &o2);
        PyLong_AsLongLongAndOverflow(c, &o3);
        if (o1 || o2 || o3 || size < INT32_MIN_ || size > INT32_MAX_)
            goto fallback;
    }
    unsigned char *d = (unsigned char *)view.buf + pos;
    for (Py_ssize_t i = 0; i < n; i++, d += 20) {
        wr_i64(d, PyLong_AsLongLong(PyList_GET_ITEM(offsets, i)));
        wr_i32(d + 8, (int32_t)PyLong_AsLongLong(PyList_GET_ITEM(sizes, i)));
        wr_i64(d + 12, PyLong_AsLongLong(PyList_GET_ITEM(codes, i)));
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(pos + n * 20);
fallback:
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

/* ---- a batch's messages, read slot by slot ----------------------------------------------------
 * same_queue(msgs, topic, queue_id) -> whether every message is for that topic (equal str) and
 * queue (equal int); None for the pure code (a message that is not exactly StoreMessage, or
 * the class changed since setup_batch). tags_codes(msgs) -> [msg.tags_code for msg in msgs],
 * or None likewise. The store reads these of every message of a batch; read through
 * PyObject_GetAttr they cost more than encoding the record. */

static int
plain_messages(PyObject *msgs)
{
    if (store_version == 0 || ((PyTypeObject *)StoreMessage)->tp_version_tag != store_version ||
        !PyList_CheckExact(msgs))
        return 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(msgs); i++)
        if (!Py_IS_TYPE(PyList_GET_ITEM(msgs, i), (PyTypeObject *)StoreMessage))
            return 0;
    return 1;
}

static inline PyObject *
slot_of(PyObject *msg, int field)
{
    return *(PyObject **)((char *)msg + store_slot[field]);
}

static PyObject *
same_queue(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_call("same_queue", nargs, 3, NULL) < 0)
        return NULL;
    PyObject *msgs = args[0], *topic = args[1], *queue_id = args[2];
    if (!plain_messages(msgs) || !PyUnicode_CheckExact(topic) || !PyLong_CheckExact(queue_id))
        Py_RETURN_NONE;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(msgs); i++) {
        PyObject *msg = PyList_GET_ITEM(msgs, i);
        PyObject *t = slot_of(msg, SM_TOPIC), *q = slot_of(msg, SM_QUEUE_ID);
        if (t == NULL || q == NULL || !PyUnicode_CheckExact(t) || !PyLong_CheckExact(q))
            Py_RETURN_NONE;
        if (t != topic && !_PyUnicode_EQ(t, topic))
            Py_RETURN_FALSE;
        if (q != queue_id) {
            int eq = PyObject_RichCompareBool(q, queue_id, Py_EQ);
            if (eq < 0)
                return NULL;
            if (!eq)
                Py_RETURN_FALSE;
        }
    }
    Py_RETURN_TRUE;
}

static PyObject *
tags_codes(PyObject *self, PyObject *msgs)
{
    if (!plain_messages(msgs))
        Py_RETURN_NONE;
    Py_ssize_t n = PyList_GET_SIZE(msgs);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *code = slot_of(PyList_GET_ITEM(msgs, i), SM_TAGS_CODE);
        if (code == NULL || !PyLong_CheckExact(code))
            Py_RETURN_NONE;
    }
    PyObject *codes = PyList_New(n);
    if (codes == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++)
        PyList_SET_ITEM(codes, i, Py_NewRef(slot_of(PyList_GET_ITEM(msgs, i), SM_TAGS_CODE)));
    return codes;
}

/* ---- offset message ids ---------------------------------------------------------------------
 * offset_msg_ids(host_hex, offsets) -> list[str], or None for the pure code (an offset that is
 * not an int in [0, 2**63), a host that is not ASCII). Each id is host_hex followed by the
 * offset as 16 upper-case hex digits: what the store answers a send with, one per record. */

static PyObject *
offset_msg_ids(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_call("offset_msg_ids", nargs, 2, NULL) < 0)
        return NULL;
    PyObject *host = args[0], *offsets = args[1];
    if (!PyUnicode_CheckExact(host) || !PyUnicode_IS_ASCII(host) || !PyList_CheckExact(offsets))
        Py_RETURN_NONE;
    Py_ssize_t host_len = PyUnicode_GET_LENGTH(host), n = PyList_GET_SIZE(offsets);
    const char *host_chars = (const char *)PyUnicode_1BYTE_DATA(host);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(offsets, i);
        if (!PyLong_CheckExact(item))
            Py_RETURN_NONE;
        int overflow;
        long long value = PyLong_AsLongLongAndOverflow(item, &overflow);
        if (overflow || value < 0)
            Py_RETURN_NONE;
    }
    static const char digits[] = "0123456789ABCDEF";
    PyObject *ids = PyList_New(n);
    if (ids == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned long long value = (unsigned long long)PyLong_AsLongLong(PyList_GET_ITEM(offsets, i));
        PyObject *id = PyUnicode_New(host_len + 16, 127);
        if (id == NULL) {
            Py_DECREF(ids);
            return NULL;
        }
        char *out = (char *)PyUnicode_1BYTE_DATA(id);
        memcpy(out, host_chars, (size_t)host_len);
        for (int d = 15; d >= 0; d--) {
            out[host_len + d] = digits[value & 0xF];
            value >>= 4;
        }
        PyList_SET_ITEM(ids, i, id);
    }
    return ids;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

static PyObject *
populate_write(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t start, length;
    if (nargs != 3 || (start = PyLong_AsSsize_t(args[1])) < 0 || (length = PyLong_AsSsize_t(args[2])) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "populate_write(mapping, start >= 0, length >= 0)");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0)
        return NULL;
    if (start > view.len)
        start = view.len;
    if (length > view.len - start)
        length = view.len - start;
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t from = (uintptr_t)view.buf + start, to = from + length;
    from -= from % page;
    int rc = 0, err = 0;
    if (to > from) {
        Py_BEGIN_ALLOW_THREADS
        rc = madvise((void *)from, to - from, MADV_POPULATE_WRITE);
        err = errno;
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&view);
    if (rc != 0 && err != EINVAL && err != ENOSYS) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyBool_FromLong(rc == 0);
}

/* ---- batch bodies from messages (the producer's side) ---------------------------------------
 * encode_batch(messages, max_props) -> bytes, or None for the pure encoder (a message whose
 * fields are not plain bytes / int / dict of str, or properties over max_props bytes: the pure
 * code words that error). protocol/message.py's encode_batch: per message the 20-byte head,
 * the body, the properties' length and the properties string (name \x01 value, \x02 between). */

static int
append_properties(PyObject *props, Out *o)
{
    Py_ssize_t pos = 0;
    PyObject *name, *value;
    while (PyDict_Next(props, &pos, &name, &value)) {
        if (!PyUnicode_CheckExact(name) || !PyUnicode_CheckExact(value))
            return 1;
        Py_ssize_t nlen, vlen;
        const char *n = PyUnicode_AsUTF8AndSize(name, &nlen);
        const char *v = n == NULL ? NULL : PyUnicode_AsUTF8AndSize(value, &vlen);
        if (v == NULL) {
            PyErr_Clear(); /* a lone surrogate: the pure code raises as str.encode() does */
            return 1;
        }
        if ((o->len && OUT_LIT(o, "\x02") < 0) || out_write(o, n, nlen) < 0 || OUT_LIT(o, "\x01") < 0 ||
            out_write(o, v, vlen) < 0)
            return -1;
    }
    return 0;
}

/* The batch body of a tuple of messages, or None (see encode_batch). */
static PyObject *
encode_items(PyObject *items, Py_ssize_t max_props)
{
    Out out = {NULL, 0, 0}, props = {NULL, 0, 0};
    PyObject *result = NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items); i++) {
        PyObject *msg = PyTuple_GET_ITEM(items, i);
        PyObject *body = PyObject_GetAttr(msg, s_body);
        PyObject *flag = body == NULL ? NULL : PyObject_GetAttr(msg, s_flag);
        PyObject *dict = flag == NULL ? NULL : PyObject_GetAttr(msg, s_properties);
        if (dict == NULL) {
            Py_XDECREF(body);
            Py_XDECREF(flag);
            goto done;
        }
        int rc = 1, overflow = 0;
        long flag_value = PyLong_CheckExact(flag) ? PyLong_AsLongAndOverflow(flag, &overflow) : 0;
        props.len = 0;
        if (PyBytes_CheckExact(body) && PyLong_CheckExact(flag) && !overflow && flag_value >= INT32_MIN_ &&
            flag_value <= INT32_MAX_ && PyDict_CheckExact(dict))
            rc = append_properties(dict, &props);
        Py_ssize_t body_len = PyBytes_CheckExact(body) ? PyBytes_GET_SIZE(body) : 0;
        if (rc == 0 && (props.len > max_props || body_len > INT32_MAX_ - 22 - props.len))
            rc = 1;
        if (rc == 0 && out_reserve(&out, 22 + body_len + props.len) < 0)
            rc = -1;
        if (rc == 0) {
            unsigned char *w = (unsigned char *)out.buf + out.len;
            wr_i32(w, (int32_t)(22 + body_len + props.len));
            wr_i32(w + 4, 0);
            wr_i32(w + 8, 0);
            wr_i32(w + 12, (int32_t)flag_value);
            wr_i32(w + 16, (int32_t)body_len);
            memcpy(w + 20, PyBytes_AS_STRING(body), body_len);
            wr_i16(w + 20 + body_len, (int16_t)props.len);
            if (props.len)
                memcpy(w + 22 + body_len, props.buf, props.len);
            out.len += 22 + body_len + props.len;
        }
        Py_DECREF(body);
        Py_DECREF(flag);
        Py_DECREF(dict);
        if (rc < 0)
            goto done;
        if (rc > 0) {
            result = Py_NewRef(Py_None);
            goto done;
        }
    }
    result = PyBytes_FromStringAndSize(out.len ? out.buf : "", out.len);
done:
    PyMem_Free(out.buf);
    PyMem_Free(props.buf);
    return result;
}

static PyObject *
encode_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t max_props;
    if (nargs != 2 || !PyList_CheckExact(args[0]) || (max_props = PyLong_AsSsize_t(args[1])) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "encode_batch(messages: list, max_props: int)");
        return NULL;
    }
    /* A snapshot: a property getter may run Python code that changes the list. */
    PyObject *items = PyList_AsTuple(args[0]);
    if (items == NULL)
        return NULL;
    PyObject *result = encode_items(items, max_props);
    Py_DECREF(items);
    return result;
}

/* ---- a producer's whole batch ------------------------------------------------------------------
 * prepare_batch(messages, topic, max_body, max_props, uniq_key, delay_key, next_id, counter)
 * -> (body, ids) or None. protocol/message.py's prepare_batch: every message of `topic`, with a
 * body of 1..max_body bytes and no delay level; each one without a unique id (uniq_key) gets
 * one, the first from next_id() and the rest that id's head and the next counter values (as
 * UniqueIdGenerator.next_ids); the batch body (encode_batch) and the ids joined with commas.
 * None hands the batch to the pure code: a message that fails a check (the producer words the
 * error), fields of other types, or a body over max_body. Ids given before a None stay given,
 * as the pure code would have given them too. */

static PyObject *
prepare_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t max_body, max_props;
    if (nargs != 8 || !PyList_CheckExact(args[0]) || !PyUnicode_CheckExact(args[1]) ||
        (max_body = PyLong_AsSsize_t(args[2])) < 0 || (max_props = PyLong_AsSsize_t(args[3])) < 0 ||
        !PyUnicode_CheckExact(args[4]) || !PyUnicode_CheckExact(args[5]) || !PyIter_Check(args[7])) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "prepare_batch(messages: list, topic: str, max_body: int, "
                                             "max_props: int, uniq_key: str, delay_key: str, next_id, counter)");
        return NULL;
    }
    PyObject *topic = args[1], *uniq_key = args[4], *delay_key = args[5], *next_id = args[6],
             *counter = args[7];
    PyObject *items = PyList_AsTuple(args[0]);
    if (items == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(items), missing = 0;
    PyObject *result = NULL, *body = NULL, *first = NULL, *joined = NULL;
    PyObject **dicts = PyMem_Calloc(n ? n : 1, sizeof(PyObject *));
    Out ids = {NULL, 0, 0};
    if (dicts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *msg = PyTuple_GET_ITEM(items, i);
        PyObject *t = PyObject_GetAttr(msg, s_topic);
        if (t == NULL)
            goto done;
        int same = PyUnicode_CheckExact(t) && (t == topic || PyUnicode_Compare(t, topic) == 0);
        Py_DECREF(t);
        PyObject *b = same ? PyObject_GetAttr(msg, s_body) : NULL;
        if (same && b == NULL)
            goto done;
        int fits = b != NULL && PyBytes_CheckExact(b) && PyBytes_GET_SIZE(b) > 0 && PyBytes_GET_SIZE(b) <= max_body;
        Py_XDECREF(b);
        if (!fits)
            goto hand_back;
        PyObject *d = dicts[i] = PyObject_GetAttr(msg, s_properties);
        if (d == NULL)
            goto done;
        if (!PyDict_CheckExact(d))
            goto hand_back;
        int delayed = PyDict_Contains(d, delay_key);
        PyObject *uniq = delayed ? NULL : PyDict_GetItemWithError(d, uniq_key);
        if (delayed < 0 || PyErr_Occurred())
            goto done;
        if (delayed || (uniq != NULL && !PyUnicode_CheckExact(uniq)))
            goto hand_back;
        missing += uniq == NULL;
    }
    if (missing) {
        first = PyObject_CallNoArgs(next_id);
        if (first == NULL)
            goto done;
        if (!PyUnicode_CheckExact(first) || !PyUnicode_IS_ASCII(first) || PyUnicode_GET_LENGTH(first) < 4)
            goto hand_back;
    }
    static const char hex[] = "0123456789ABCDEF";
    Py_ssize_t given = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *uniq = PyDict_GetItemWithError(dicts[i], uniq_key);
        if (uniq == NULL && PyErr_Occurred())
            goto done;
        PyObject *fresh = NULL;
        if (uniq == NULL) {
            if (first == NULL) /* none was missing in the first walk, and no code ran since */
                goto hand_back;
            if (given++ == 0) {
                fresh = Py_NewRef(first);
            } else {
                PyObject *count = PyIter_Next(counter);
                if (count == NULL) {
                    if (!PyErr_Occurred())
                        PyErr_SetString(PyExc_RuntimeError, "the unique id counter ended");
                    goto done;
                }
                unsigned long long c = PyLong_Check(count) ? PyLong_AsUnsignedLongLongMask(count) : 0;
                int is_int = PyLong_Check(count);
                Py_DECREF(count);
                if (!is_int || (c == (unsigned long long)-1 && PyErr_Occurred()))
                    goto done_or_hand_back;
                Py_ssize_t len = PyUnicode_GET_LENGTH(first);
                fresh = PyUnicode_New(len, 127);
                if (fresh == NULL)
                    goto done;
                char *w = (char *)PyUnicode_1BYTE_DATA(fresh);
                memcpy(w, PyUnicode_1BYTE_DATA(first), (size_t)(len - 4));
                for (int k = 3; k >= 0; k--, c >>= 4)
                    w[len - 4 + k] = hex[c & 0xF];
            }
            int rc = PyDict_SetItem(dicts[i], uniq_key, fresh);
            uniq = fresh;
            Py_DECREF(fresh); /* the dict holds it */
            if (rc < 0)
                goto done;
        }
        Py_ssize_t size;
        const char *text = PyUnicode_AsUTF8AndSize(uniq, &size);
        if (text == NULL) {
            PyErr_Clear(); /* a lone surrogate: the pure code fails on it as str.encode() does */
            goto hand_back;
        }
        if ((i && OUT_LIT(&ids, ",") < 0) || out_write(&ids, text, size) < 0)
            goto done;
    }
    body = encode_items(items, max_props);
    if (body == NULL)
        goto done;
    if (body == Py_None || PyBytes_GET_SIZE(body) > max_body)
        goto hand_back;
    joined = PyUnicode_DecodeUTF8(ids.len ? ids.buf : "", ids.len, NULL);
    if (joined != NULL)
        result = PyTuple_Pack(2, body, joined);
    goto done;
done_or_hand_back:
    if (PyErr_Occurred())
        goto done;
hand_back:
    result = Py_NewRef(Py_None);
done:
    if (dicts != NULL) {
        for (Py_ssize_t i = 0; i < n; i++)
            Py_XDECREF(dicts[i]);
        PyMem_Free(dicts);
    }
    PyMem_Free(ids.buf);
    Py_XDECREF(body);
    Py_XDECREF(first);
    Py_XDECREF(joined);
    Py_DECREF(items);
    return result;
}

/* ---- send headers ---------------------------------------------------------------------------
 * send_header(fields: dict, v2: bool) -> SendHeader | None: the header of a SEND_MESSAGE (full
 * names) or SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE (one-letter names) as protocol/headers.py's
 * SendHeader, for the shape every client sends: str values, integers as plain decimals in range,
 * booleans as "true"/"false"/"1"/"0". Anything else (a missing required field, a number the
 * pydantic model reads leniently or refuses) gives None, and the model decides and words the
 * error; what both accept they read alike. */

enum { SF_STR, SF_STR_OPT, SF_INT32, SF_INT32_OPT, SF_INT64, SF_BOOL };

#define SEND_FIELDS 13

static const struct {
    int kind;
    int required;
    long long fallback; /* the default of an absent int or bool field */
} send_fields[SEND_FIELDS] = {
    {SF_STR, 1, 0},       /* producer_group */
    {SF_STR, 1, 0},       /* topic */
    {SF_STR, 0, 0},       /* default_topic: send_default_topic when absent */
    {SF_INT32, 0, 4},     /* default_topic_queue_nums */
    {SF_INT32, 1, 0},     /* queue_id */
    {SF_INT32, 0, 0},     /* sys_flag */
    {SF_INT64, 1, 0},     /* born_timestamp */
    {SF_INT32, 0, 0},     /* flag */
    {SF_STR_OPT, 0, 0},   /* properties */
    {SF_INT32_OPT, 0, 0}, /* reconsume_times */
    {SF_BOOL, 0, 0},      /* unit_mode */
    {SF_INT32_OPT, 0, 0}, /* max_reconsume_times */
    {SF_BOOL, 0, 0},      /* batch */
};

static PyObject *SendHeader = NULL;               /* the NamedTuple class */
static PyObject *send_names[2][SEND_FIELDS];      /* wire names: [0] SEND_MESSAGE, [1] V2 */
/* The models also read a field under its Python name (populate_by_name): a header holding
 * one of those that differ from the field's wire name goes to the model. Per header kind, the
 * differing names (NULL-terminated). */
static PyObject *send_other_names[2][SEND_FIELDS + 1];
static PyObject *send_default_topic = NULL;

static PyObject *
setup_send_header(PyObject *self, PyObject *args)
{
    PyObject *cls, *names[2], *default_topic;
    if (!PyArg_ParseTuple(args, "OO!O!U:setup_send_header", &cls, &PyTuple_Type, &names[0], &PyTuple_Type,
                          &names[1], &default_topic))
        return NULL;
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "setup_send_header() needs the SendHeader tuple class");
        return NULL;
    }
    PyObject *fields = PyObject_GetAttrString(cls, "_fields");
    if (fields == NULL)
        return NULL;
    int ok = PyTuple_Check(fields) && PyTuple_GET_SIZE(fields) == SEND_FIELDS;
    for (int v = 0; ok && v < 2; v++) {
        ok = PyTuple_GET_SIZE(names[v]) == SEND_FIELDS;
        for (int i = 0; ok && i < SEND_FIELDS; i++)
            ok = PyUnicode_Check(PyTuple_GET_ITEM(names[v], i)) && PyUnicode_Check(PyTuple_GET_ITEM(fields, i));
    }
    if (!ok) {
        Py_DECREF(fields);
        PyErr_SetString(PyExc_ValueError, "setup_send_header(): SendHeader's 13 fields and their wire names");
        return NULL;
    }
    for (int v = 0; v < 2; v++) {
        int n = 0;
        for (int i = 0; i < SEND_FIELDS; i++) {
            PyObject *wire = PyTuple_GET_ITEM(names[v], i), *name = PyTuple_GET_ITEM(fields, i);
            Py_XSETREF(send_names[v][i], Py_NewRef(wire));
            if (PyUnicode_Compare(name, wire) != 0) {
                Py_XSETREF(send_other_names[v][n], Py_NewRef(name)); /* dst is evaluated twice */
                n++;
            }
        }
        for (; n <= SEND_FIELDS; n++)
            Py_CLEAR(send_other_names[v][n]);
    }
    Py_DECREF(fields);
    Py_XSETREF(SendHeader, Py_NewRef(cls));
    Py_XSETREF(send_default_topic, Py_NewRef(default_topic));
    Py_RETURN_NONE;
}

/* A plain decimal ("-"? digits, at most 18 of them): 1 and *out, else 0. */
static int
plain_decimal(PyObject *text, long long *out)
{
    if (!PyUnicode_IS_ASCII(text))
        return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    const char *p = (const char *)PyUnicode_1BYTE_DATA(text);
    int negative = n > 0 && p[0] == '-';
    Py_ssize_t i = negative;
    if (n - i < 1 || n - i > 18)
        return 0;
    long long value = 0;
    for (; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return 0;
        value = value * 10 + (p[i] - '0');
    }
    *out = negative ? -value : value;
    return 1;
}

static PyObject *
send_header(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "send_header(fields, v2)");
        return NULL;
    }
    if (SendHeader == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_speedups: setup_send_header() was not called");
        return NULL;
    }
    PyObject *fields = args[0];
    int v2 = PyObject_IsTrue(args[1]);
    if (v2 < 0)
        return NULL;
    if (!PyDict_CheckExact(fields))
        Py_RETURN_NONE;
    PyObject *items = PyTuple_New(SEND_FIELDS);
    if (items == NULL)
        return NULL;
    Py_ssize_t found = 0;
    for (int i = 0; i < SEND_FIELDS; i++) {
        PyObject *value = PyDict_GetItemWithError(fields, send_names[v2][i]);
        PyObject *item = NULL;
        int kind = send_fields[i].kind;
        if (value == NULL) {
            if (PyErr_Occurred())
                goto error;
            if (send_fields[i].required)
                goto refuse;
            if (kind == SF_STR)
                item = Py_NewRef(send_default_topic);
            else if (kind == SF_STR_OPT || kind == SF_INT32_OPT)
                item = Py_NewRef(Py_None);
            else if (kind == SF_BOOL)
                item = Py_NewRef(send_fields[i].fallback ? Py_True : Py_False);
            else
                item = PyLong_FromLongLong(send_fields[i].fallback);
        }
        else {
            found++;
            if (!PyUnicode_CheckExact(value))
                goto refuse;
            if (kind == SF_STR || kind == SF_STR_OPT) {
                item = Py_NewRef(value);
            }
            else if (kind == SF_BOOL) {
                if (PyUnicode_CompareWithASCIIString(value, "true") == 0 ||
                    PyUnicode_CompareWithASCIIString(value, "1") == 0)
                    item = Py_NewRef(Py_True);
                else if (PyUnicode_CompareWithASCIIString(value, "false") == 0 ||
                         PyUnicode_CompareWithASCIIString(value, "0") == 0)
                    item = Py_NewRef(Py_False);
                else
                    goto refuse;
            }
            else {
                long long number;
                if (!plain_decimal(value, &number))
                    goto refuse;
                if (kind != SF_INT64 && (number < INT32_MIN || number > INT32_MAX))
                    goto refuse;
                item = PyLong_FromLongLong(number);
            }
        }
        if (item == NULL)
            goto error;
        PyTuple_SET_ITEM(items, i, item);
    }
    if (PyDict_GET_SIZE(fields) > found) {
        /* Other keys too: unknown ones are ignored, a field under its Python name is not. */
        for (PyObject **name = send_other_names[v2]; *name != NULL; name++) {
            int present = PyDict_Contains(fields, *name);
            if (present < 0)
                goto error;
            if (present)
                goto refuse;
        }
    }
    /* tuple.__new__(SendHeader, items): the subtype built the way CPython builds one. */
    PyObject *new_args = PyTuple_Pack(1, items);
    Py_DECREF(items);
    if (new_args == NULL)
        return NULL;
    PyObject *header = PyTuple_Type.tp_new((PyTypeObject *)SendHeader, new_args, NULL);
    Py_DECREF(new_args);
    return header;
refuse:
    Py_DECREF(items);
    Py_RETURN_NONE;
error:
    Py_DECREF(items);
    return NULL;
}

/*
 * GroupSync: the SYNC_FLUSH group commit's disk thread (broker/store/flush.py holds the
 * pure-Python twin and says how the flusher uses it). A plain POSIX thread that never takes
 * the GIL: the loop hands over files and goes on; the thread fdatasyncs everything handed
 * over since its last round, records how many hand-overs that round had taken (the first N,
 * counting from the first) as covered or as failed, and writes a byte to a pipe the loop
 * watches. So one round follows another as soon as the disk answers, with no
 * executor hand-off and no wait for the GIL or for a turn of the event loop in between.
 */
#include <pthread.h>
#include <fcntl.h>

typedef struct {
    PyObject_HEAD
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int *fds;                 /* handed over, not yet taken by the thread; no repeats */
    Py_ssize_t nfds, cap;
    unsigned long long handed;   /* hand-overs so far */
    int directory;               /* a directory to fsync after the files this round, or -1 */
    int has_pending;
    unsigned long long covered;  /* hand-overs the last successful round covered */
    unsigned long long failed;   /* hand-overs the last failed round had taken */
    unsigned long long rounds;
    unsigned long long ended;    /* rounds ended, good or failed: read without the lock */
    int error;                /* errno of a failed round not yet collected, else 0 */
    int stop;
    int rfd, wfd;
} GroupSync;

/* ``sync(fd)``, again when a signal interrupted it: 0, or the errno it failed with. */
static int
sync_fd(int (*sync)(int), int fd)
{
    while (sync(fd) != 0) {
        if (errno != EINTR)
            return errno;
    }
    return 0;
}

static void *
group_sync_run(void *arg)
{
    GroupSync *g = (GroupSync *)arg;
    int *fds = NULL;
    Py_ssize_t cap = 0;
    pthread_mutex_lock(&g->mu);
    for (;;) {
        while (!g->has_pending && !g->stop)
            pthread_cond_wait(&g->cv, &g->mu);
        if (!g->has_pending)
            break;  /* stopping, and everything submitted was synced */
        Py_ssize_t n = g->nfds;
        int directory = g->directory;
        g->directory = -1;
        if (n > cap) {
            int *grown = realloc(fds, (size_t)n * sizeof(int));
            if (grown == NULL) {
                g->error = ENOMEM;
                g->failed = g->handed;
                g->has_pending = 0;
                g->nfds = 0;
                __atomic_store_n(&g->ended, g->ended + 1, __ATOMIC_RELEASE);
                pthread_mutex_unlock(&g->mu);
                goto notify_only;
            }
            fds = grown;
            cap = n;
        }
        if (n > 0)
            memcpy(fds, g->fds, (size_t)n * sizeof(int));
        unsigned long long taken = g->handed;
        g->has_pending = 0;
        g->nfds = 0;
        pthread_mutex_unlock(&g->mu);
        int err = 0;
        for (Py_ssize_t i = 0; i < n && !err; i++)
            err = sync_fd(fdatasync, fds[i]);
        /* A new file's name: fsync, since fdatasync of a directory need not persist a rename. */
        if (!err && directory >= 0)
            err = sync_fd(fsync, directory);
        pthread_mutex_lock(&g->mu);
        if (err) {
            g->error = err;
            g->failed = taken;
        }
        else {
            g->covered = taken;
            g->rounds++;
        }
        __atomic_store_n(&g->ended, g->ended + 1, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&g->mu);
    notify_only:;
        /* A full pipe already holds a wake-up the loop has not read: nothing is lost. */
        ssize_t wrote = write(g->wfd, "", 1);
        (void)wrote;
        pthread_mutex_lock(&g->mu);
    }
    pthread_mutex_unlock(&g->mu);
    free(fds);
    return NULL;
}

static PyObject *
group_sync_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0)) {
        PyErr_SetString(PyExc_TypeError, "GroupSync() takes no arguments");
        return NULL;
    }
    GroupSync *g = (GroupSync *)type->tp_alloc(type, 0);
    if (g == NULL)
        return NULL;
    g->rfd = g->wfd = -1;
    g->directory = -1;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    int pipe_fds[2];
    if (pipe(pipe_fds) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(g);
        return NULL;
    }
    g->rfd = pipe_fds[0];
    g->wfd = pipe_fds[1];
    for (int i = 0; i < 2; i++) {
        fcntl(pipe_fds[i], F_SETFL, fcntl(pipe_fds[i], F_GETFL) | O_NONBLOCK);
        fcntl(pipe_fds[i], F_SETFD, FD_CLOEXEC);
    }
    int rc = pthread_create(&g->thread, NULL, group_sync_run, g);
    if (rc != 0) {
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(g);
        return NULL;
    }
#ifdef __linux__
    pthread_setname_np(g->thread, "store-gsync");  /* 15 characters at most */
#endif
    g->started = 1;
    return (PyObject *)g;
}

static void
group_sync_stop(GroupSync *g)
{
    /* Called with the GIL held: whoever clears ``started`` is the one that joins and closes,
     * and a submit from then on is refused (it checks ``started`` under the GIL too). */
    if (g->started) {
        g->started = 0;
        pthread_mutex_lock(&g->mu);
        g->stop = 1;
        pthread_cond_signal(&g->cv);
        pthread_mutex_unlock(&g->mu);
        Py_BEGIN_ALLOW_THREADS
        pthread_join(g->thread, NULL);
        Py_END_ALLOW_THREADS
        close(g->rfd);
        close(g->wfd);
        g->rfd = g->wfd = -1;
    }
}

static void
group_sync_dealloc(GroupSync *g)
{
    group_sync_stop(g);
    if (g->rfd >= 0) {  /* the thread never started */
        close(g->rfd);
        close(g->wfd);
    }
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g->fds);
    Py_TYPE(g)->tp_free((PyObject *)g);
}

static PyObject *
group_sync_submit(GroupSync *g, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2 || !PyTuple_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "submit(fds: tuple[int, ...], directory: int = -1)");
        return NULL;
    }
    long directory = -1;
    if (nargs == 2) {
        directory = PyLong_AsLong(args[1]);
        if (directory == -1 && PyErr_Occurred())
            return NULL;
        if (directory < -1 || directory > INT_MAX) {
            PyErr_Format(PyExc_ValueError, "not a file descriptor: %ld", directory);
            return NULL;
        }
    }
    Py_ssize_t n = PyTuple_GET_SIZE(args[0]);
    int local[8];
    int *wanted = n <= 8 ? local : PyMem_Malloc((size_t)n * sizeof(int));
    if (wanted == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        long fd = PyLong_AsLong(PyTuple_GET_ITEM(args[0], i));
        if (fd == -1 && PyErr_Occurred())
            goto fail;
        if (fd < 0 || fd > INT_MAX) {
            PyErr_Format(PyExc_ValueError, "not a file descriptor: %ld", fd);
            goto fail;
        }
        wanted[i] = (int)fd;
    }
    if (!g->started) {
        PyErr_SetString(PyExc_RuntimeError, "GroupSync is closed");
        goto fail;
    }
    pthread_mutex_lock(&g->mu);
    if (g->nfds + n > g->cap) {
        Py_ssize_t cap = (g->nfds + n) * 2;
        int *grown = realloc(g->fds, (size_t)cap * sizeof(int));
        if (grown == NULL) {
            pthread_mutex_unlock(&g->mu);
            PyErr_NoMemory();
            goto fail;
        }
        g->fds = grown;
        g->cap = cap;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t j = 0;
        while (j < g->nfds && g->fds[j] != wanted[i])
            j++;
        if (j == g->nfds)
            g->fds[g->nfds++] = wanted[i];
    }
    if (directory >= 0)
        g->directory = (int)directory;
    g->handed++;
    g->has_pending = 1;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    if (wanted != local)
        PyMem_Free(wanted);
    Py_RETURN_NONE;
fail:
    if (wanted != local)
        PyMem_Free(wanted);
    return NULL;
}

/* How many rounds have ended, without a system call: the loop asks between the requests of
 * one read, where reading the pipe each time would cost more than the answer saves. */
static PyObject *
group_sync_ended(GroupSync *g, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromUnsignedLongLong(__atomic_load_n(&g->ended, __ATOMIC_ACQUIRE));
}

static PyObject *
group_sync_collect(GroupSync *g, PyObject *Py_UNUSED(ignored))
{
    if (g->rfd >= 0) {
        char sink[256];
        while (read(g->rfd, sink, sizeof sink) > 0)
            ;
    }
    pthread_mutex_lock(&g->mu);
    unsigned long long covered = g->covered;
    unsigned long long rounds = g->rounds;
    unsigned long long failed = g->failed;
    int error = g->error;
    g->error = 0;
    pthread_mutex_unlock(&g->mu);
    return Py_BuildValue("(KKiK)", covered, rounds, error, failed);
}

static PyObject *
group_sync_fileno(GroupSync *g, PyObject *Py_UNUSED(ignored))
{
    if (g->rfd < 0) {
        PyErr_SetString(PyExc_ValueError, "GroupSync is closed");
        return NULL;
    }
    return PyLong_FromLong(g->rfd);
}

static PyObject *
group_sync_close(GroupSync *g, PyObject *Py_UNUSED(ignored))
{
    group_sync_stop(g);
    Py_RETURN_NONE;
}

static PyMethodDef group_sync_methods[] = {
    {"submit", (PyCFunction)(void (*)(void))group_sync_submit, METH_FASTCALL,
     "Hand over files to fdatasync (with those handed over before) and, optionally, a "
     "directory to fsync after them."},
    {"ended", (PyCFunction)group_sync_ended, METH_NOARGS,
     "Rounds ended so far, good or failed (no system call)."},
    {"collect", (PyCFunction)group_sync_collect, METH_NOARGS,
     "(hand-overs the last good round covered, good rounds, errno of a failed round or 0, "
     "hand-overs the last failed round had taken); clears the wake-ups and the errno."},
    {"fileno", (PyCFunction)group_sync_fileno, METH_NOARGS, "The pipe that wakes the loop."},
    {"close", (PyCFunction)group_sync_close, METH_NOARGS,
     "Sync what was submitted, then stop the thread (blocking)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject GroupSyncType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aiorocketmq.protocol._speedups.GroupSync",
    .tp_basicsize = sizeof(GroupSync),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The SYNC_FLUSH group commit's disk thread (see broker/store/flush.py).",
    .tp_new = group_sync_new,
    .tp_dealloc = (destructor)group_sync_dealloc,
    .tp_methods = group_sync_methods,
};

static PyMethodDef methods[] = {
    {"setup_send_header", setup_send_header, METH_VARARGS, "Register headers.py's SendHeader and wire names."},
    {"send_header", (PyCFunction)(void (*)(void))send_header, METH_FASTCALL,
     "A send request's header, or None for the pydantic model."},
    {"setup_commands", setup_commands, METH_VARARGS, "Register command.py's classes and fallbacks."},
    {"setup_records", setup_records, METH_VARARGS, "Register message.py's classes and helpers."},
    {"java_hash", java_hash, METH_O, "Java String.hashCode() of a str."},
    {"crc32", crc32_py, METH_O, "zlib.crc32 of a bytes-like object (the record body checksum)."},
    {"normalize_fields", normalize_fields, METH_O, "extFields as decoded from JSON, as strings."},
    {"command_from_mapping", (PyCFunction)(void (*)(void))command_from_mapping, METH_FASTCALL,
     "The command of a decoded JSON or msgpack header."},
    {"decode_rocketmq_header", (PyCFunction)(void (*)(void))decode_rocketmq_header, METH_FASTCALL,
     "The command of a ROCKETMQ binary header."},
    {"encode_json_header", encode_json_header, METH_O, "A command's JSON header, or None."},
    {"encode_rocketmq_header", encode_rocketmq_header, METH_O, "A command's ROCKETMQ header, or None."},
    {"decode_properties", decode_properties, METH_O, "Parse a properties string."},
    {"encode_records", (PyCFunction)(void (*)(void))encode_records, METH_FASTCALL,
     "The commit log's records of a batch."},
    {"index_put_many", (PyCFunction)(void (*)(void))index_put_many, METH_FASTCALL,
     "Index entries of many keys."},
    {"split_frames", (PyCFunction)(void (*)(void))split_frames, METH_FASTCALL,
     "Decode the whole frames of a byte stream."},
    {"decode_record", (PyCFunction)(void (*)(void))decode_record, METH_FASTCALL,
     "Decode one stored record."},
    {"acl_field_values", (PyCFunction)(void (*)(void))acl_field_values, METH_FASTCALL,
     "The field values an ACL signature covers, in key order, as UTF-8."},
    {"setup_batch", setup_batch, METH_VARARGS, "Register broker/batch.py's class and property names."},
    {"index_build_batch", (PyCFunction)(void (*)(void))index_build_batch, METH_FASTCALL,
     "A batch's index entries into one index file."},
    {"cq_put_entries", (PyCFunction)(void (*)(void))cq_put_entries, METH_FASTCALL,
     "Consume-queue entries into a mapped file."},
    {"store_batch", (PyCFunction)(void (*)(void))store_batch, METH_FASTCALL,
     "The store messages of a batch body."},
    {"encode_batch", (PyCFunction)(void (*)(void))encode_batch, METH_FASTCALL,
     "A batch body of messages, or None for the pure encoder."},
    {"prepare_batch", (PyCFunction)(void (*)(void))prepare_batch, METH_FASTCALL,
     "A producer's batch body and unique ids, or None for the pure code."},
    {"same_queue", (PyCFunction)(void (*)(void))same_queue, METH_FASTCALL,
     "Whether every message of a batch is for one topic-queue, or None for the pure code."},
    {"tags_codes", tags_codes, METH_O, "The tags codes of a batch's messages, or None for the pure code."},
    {"offset_msg_ids", (PyCFunction)(void (*)(void))offset_msg_ids, METH_FASTCALL,
     "Offset message ids: a host's hex and each offset in 16 hex digits."},
    {"populate_write", (PyCFunction)(void (*)(void))populate_write, METH_FASTCALL,
     "Fault in the pages of a mapping range, writable, without holding the GIL."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups", "Compiled hot paths of aiorocketmq.protocol.", -1, methods,
};

#define INTERN(var, text)                          \
    if ((var = PyUnicode_InternFromString(text)) == NULL) \
        return NULL;

PyMODINIT_FUNC
PyInit__speedups(void)
{
    crc_init();
    INTERN(s_code, "code");
    INTERN(s_language, "language");
    INTERN(s_version, "version");
    INTERN(s_opaque, "opaque");
    INTERN(s_flag, "flag");
    INTERN(s_remark, "remark");
    INTERN(s_ext_fields, "ext_fields");
    INTERN(s_body, "body");
    INTERN(s_serialize_type, "serialize_type");
    INTERN(s_extFields, "extFields");
    INTERN(s_OTHER, "OTHER");
    INTERN(s_true, "true");
    INTERN(s_false, "false");
    INTERN(s_topic, "topic");
    INTERN(s_properties, "properties");
    INTERN(s_queue_id, "queue_id");
    INTERN(s_queue_offset, "queue_offset");
    INTERN(s_commit_log_offset, "commit_log_offset");
    INTERN(s_sys_flag, "sys_flag");
    INTERN(s_born_timestamp, "born_timestamp");
    INTERN(s_born_host, "born_host");
    INTERN(s_store_timestamp, "store_timestamp");
    INTERN(s_store_host, "store_host");
    INTERN(s_reconsume_times, "reconsume_times");
    INTERN(s_prepared_transaction_offset, "prepared_transaction_offset");
    INTERN(s_body_crc, "body_crc");
    INTERN(s_store_size, "store_size");
    INTERN(s_broker_name, "broker_name");
    INTERN(s_msg_born_host, "_born_host");
    INTERN(s_msg_store_host, "_store_host");
    INTERN(s_tags_code, "tags_code");
    INTERN(s_keys, "keys");
    INTERN(s_uniq_key, "uniq_key");
    if (PyType_Ready(&GroupSyncType) < 0)
        return NULL;
    PyObject *mod = PyModule_Create(&module);
    if (mod == NULL)
        return NULL;
    Py_INCREF(&GroupSyncType);
    if (PyModule_AddObject(mod, "GroupSync", (PyObject *)&GroupSyncType) < 0) {
        Py_DECREF(&GroupSyncType);
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
