/* error.c: per-thread error message storage (see error.h). */
#include <stdarg.h>
#include <stdio.h>

#include "error.h"

static _Thread_local char g_msg[512];

lkv_status lkv_fail(lkv_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_msg, sizeof g_msg, fmt, ap);
    va_end(ap);
    return st;
}

void lkv_clear_error(void) { g_msg[0] = 0; }

const char *lkv_error_message(void) { return g_msg; }
