/* Prints the offsets of trace_proto.h's area header fields from
 * modules_off on, and of mh_trace_pycode's, for test_records.py to hold
 * memhook/tracing/area.py and pyframes.py to them. */
#include <stddef.h>
#include <stdio.h>

#include "trace_proto.h"

#define A(f) printf("area.%s %zu %zu\n", #f, offsetof(mh_trace_area, f), sizeof(((mh_trace_area *)0)->f))
#define C(f) printf("code.%s %zu %zu\n", #f, offsetof(mh_trace_pycode, f), sizeof(((mh_trace_pycode *)0)->f))

int main(void)
{
    A(modules_off); A(modules_cap); A(modules_used); A(modules_lost); A(stacks_off);
    A(stacks_cap); A(stacks_next); A(stack_depth); A(py_depth); A(py_off); A(py_cap);
    A(py_used); A(py_lost); A(codes_off); A(codes_cap); A(codes_used); A(codes_lost);
    A(py_version); A(reserved2);
    C(len); C(firstlineno); C(code); C(filename_obj); C(qualname_obj); C(linetable_obj);
    C(filename_hash); C(qualname_hash); C(filename_len); C(qualname_len); C(linetable_len);
    C(filename_kind); C(qualname_kind); C(flags); C(py_minor);
    printf("code.size %zu 0\n", sizeof(mh_trace_pycode));
    return 0;
}
