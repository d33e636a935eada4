// HOST SIMULATION stand-in for CANN's acl/acl_base.h (test double and dry-run
// tool for torch-npu-inductor-patches; not CANN). It declares a SUBSET of what
// the real ACL headers declare, with the same names, values and prototypes:
// test/test_sim_surface.py checks that against the headers every torch_npu
// wheel ships. Add nothing here that the real headers lack.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "error_codes/rt_error_codes.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifndef ACL_FUNC_VISIBILITY
#define ACL_FUNC_VISIBILITY __attribute__((visibility("default")))
#endif

typedef void *aclrtStream;
typedef void *aclrtEvent;
typedef void *aclrtContext;
typedef int aclError;

static const int ACL_ERROR_NONE = 0;
static const int ACL_SUCCESS = 0;
static const int ACL_ERROR_INVALID_PARAM = 100000;
static const int ACL_ERROR_BAD_ALLOC = 200000;
static const int ACL_ERROR_INVALID_DEVICE = 200002;
static const int ACL_ERROR_INTERNAL_ERROR = 500000;
static const int ACL_ERROR_FAILURE = 500001;

typedef enum {
  ACL_DEBUG = 0,
  ACL_INFO = 1,
  ACL_WARNING = 2,
  ACL_ERROR = 3,
} aclLogLevel;

// Simulation: every message is recorded (acl_sim::app_logs()), none printed.
ACL_FUNC_VISIBILITY void aclAppLog(aclLogLevel logLevel, const char *func, const char *file, uint32_t line,
                                   const char *fmt, ...);

#define ACL_APP_LOG(level, fmt, ...) aclAppLog(level, __FUNCTION__, __FILE__, __LINE__, fmt, ##__VA_ARGS__)

#ifdef __cplusplus
}
#endif
