/*
 * error.h: the thread-local last-error message behind lkv_last_error().
 *
 * lkv_fail() formats a message, stores it for the calling thread and returns
 * the status, so a failing path reads `return lkv_fail(LKV_ERR_SHAPE, ...)`.
 */
#ifndef LKV_ERROR_H
#define LKV_ERROR_H

#include "llamakv.h"

lkv_status lkv_fail(lkv_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void lkv_clear_error(void);
const char *lkv_error_message(void);

#define LKV_TRY(expr) do { lkv_status st_ = (expr); if (st_ != LKV_OK) return st_; } while (0)

#endif
