/*
 * mode.c - MEMHOOK_CUDA_MODE: "none", "bistro", "reloc", a comma list of
 * those, or an integer 0-3.  Python's HookMode.parse follows the same
 * grammar (a test holds them together).
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "cuda_hooks.h"

#define VALID "valid: none, bistro, reloc, a comma list of them, or 0-3"

static int refuse(char *why, size_t why_len, const char *token, size_t len, const char *what)
{
    if (why != NULL && why_len > 0)
        snprintf(why, why_len, "MEMHOOK_CUDA_MODE: %s \"%.*s\" (" VALID ")", what, (int)len,
                 token);
    return EINVAL;
}

int memhook_mode_parse(const char *text, unsigned *mode, char *why, size_t why_len)
{
    if (mode == NULL)
        return EINVAL;
    const char *p = text ? text : "";
    while (isspace((unsigned char)*p))
        p++;
    if (*p == '\0') {
        *mode = MEMHOOK_MODE_DEFAULT;
        return 0;
    }
    if (isdigit((unsigned char)*p)) {
        const char *q = p;
        while (isdigit((unsigned char)*q))
            q++;
        const char *end = q;
        while (isspace((unsigned char)*q))
            q++;
        if (*q != '\0' || end - p != 1 || *p > '3')
            return refuse(why, why_len, text, strlen(text), "bad mode");
        *mode = (unsigned)(*p - '0');
        return 0;
    }
    unsigned bits = 0;
    for (;;) {
        const char *comma = strchr(p, ',');
        const char *end = comma ? comma : p + strlen(p);
        const char *a = p, *b = end;
        while (a < b && isspace((unsigned char)*a))
            a++;
        while (b > a && isspace((unsigned char)b[-1]))
            b--;
        size_t len = (size_t)(b - a);
        if (len == 6 && strncasecmp(a, "bistro", 6) == 0)
            bits |= MEMHOOK_MODE_BISTRO;
        else if (len == 5 && strncasecmp(a, "reloc", 5) == 0)
            bits |= MEMHOOK_MODE_RELOC;
        else if (len == 4 && strncasecmp(a, "none", 4) == 0)
            ;
        else if (len == 0)
            return refuse(why, why_len, text, strlen(text), "empty token in");
        else
            return refuse(why, why_len, a, len, "unknown token");
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    *mode = bits;
    return 0;
}
