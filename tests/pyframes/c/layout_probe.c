/* Prints, for the CPython whose headers it is compiled against, the
 * offsets and constants csrc/trace/pyframes_abi.c and pycode.c read
 * (tests/pyframes/test_layouts.py compares).  Compiled with
 * -I<include> -I<include>/internal. */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#if PY_VERSION_HEX >= 0x030B0000
#include "internal/pycore_frame.h"
#else
#include "frameobject.h"
#endif

#define P(name, value) printf("%s %lld\n", name, (long long)(value))

int main(void)
{
    P("minor", PY_MINOR_VERSION);
    P("ob_type", offsetof(PyObject, ob_type));
    P("ts_thread_id", offsetof(PyThreadState, thread_id));
#if PY_VERSION_HEX < 0x030B0000
    P("ts_frame", offsetof(PyThreadState, frame));
    P("fr_back", offsetof(PyFrameObject, f_back));
    P("fr_code", offsetof(PyFrameObject, f_code));
    P("fr_instr", offsetof(PyFrameObject, f_lasti));
    P("fr_instr_size", sizeof(((PyFrameObject *)0)->f_lasti));
    P("co_qualname", offsetof(PyCodeObject, co_name));
#if PY_VERSION_HEX >= 0x030A0000
    P("co_linetable", offsetof(PyCodeObject, co_linetable));
#else
    P("co_linetable", offsetof(PyCodeObject, co_lnotab));
#endif
#else
#if PY_VERSION_HEX < 0x030D0000
    P("ts_frame", offsetof(PyThreadState, cframe));
    P("cframe_current", offsetof(_PyCFrame, current_frame));
    P("fr_code", offsetof(_PyInterpreterFrame, f_code));
    P("fr_instr", offsetof(_PyInterpreterFrame, prev_instr));
#else
    P("ts_frame", offsetof(PyThreadState, current_frame));
    P("fr_code", offsetof(_PyInterpreterFrame, f_executable));
    P("fr_instr", offsetof(_PyInterpreterFrame, instr_ptr));
#endif
    P("fr_back", offsetof(_PyInterpreterFrame, previous));
    P("fr_owner", offsetof(_PyInterpreterFrame, owner));
    P("owner_generator", FRAME_OWNED_BY_GENERATOR);
#if PY_VERSION_HEX >= 0x030C0000
    P("owner_cstack", FRAME_OWNED_BY_CSTACK);
#endif
    P("co_qualname", offsetof(PyCodeObject, co_qualname));
    P("co_linetable", offsetof(PyCodeObject, co_linetable));
    P("co_code_adaptive", offsetof(PyCodeObject, co_code_adaptive));
    P("co_firsttraceable", offsetof(PyCodeObject, _co_firsttraceable));
    P("codeunit_size", sizeof(_Py_CODEUNIT));
#endif
    P("co_firstlineno", offsetof(PyCodeObject, co_firstlineno));
    P("co_filename", offsetof(PyCodeObject, co_filename));
    P("str_ascii_data", sizeof(PyASCIIObject));
    P("str_compact_data", sizeof(PyCompactUnicodeObject));
    P("str_length", offsetof(PyASCIIObject, length));
    P("str_hash", offsetof(PyASCIIObject, hash));
    P("str_state", offsetof(PyASCIIObject, state));
    P("bytes_size", offsetof(PyVarObject, ob_size));
    P("bytes_data", offsetof(PyBytesObject, ob_sval));
    /* Where each bit of the string's state lies. */
    PyASCIIObject s;
    uint32_t word;
#define BIT(name, field, value)                                               \
    memset(&s, 0, sizeof s);                                                  \
    s.state.field = value;                                                    \
    memcpy(&word, (char *)&s + offsetof(PyASCIIObject, state), sizeof word); \
    P(name, word);
    BIT("state_kind", kind, 7);
    BIT("state_compact", compact, 1);
    BIT("state_ascii", ascii, 1);
#if PY_VERSION_HEX < 0x030C0000
    BIT("state_ready", ready, 1);
#endif
    return 0;
}
