// HOST SIMULATION stand-in for CANN's acl/error_codes/rt_error_codes.h (test
// double; not CANN): the runtime error codes the simulation returns, with the
// real names and values (checked by test/test_sim_surface.py).
#pragma once

#define ACL_ERROR_RT_PARAM_INVALID 107000
#define ACL_ERROR_RT_CONTEXT_NULL 107002
#define ACL_ERROR_RT_STREAM_CONTEXT 107003
#define ACL_ERROR_RT_INVALID_HANDLE 107017
#define ACL_ERROR_RT_STREAM_CAPTURED 107027
#define ACL_ERROR_RT_STREAM_NOT_CAPTURED 107029
#define ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT 107030
#define ACL_ERROR_RT_MEMORY_ALLOCATION 207001
#define ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED 507903
