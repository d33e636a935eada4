// HOST SIMULATION stand-in for CANN's acl/acl.h (test double and dry-run tool
// for torch-npu-inductor-patches; not CANN, runs no NPU code). The stand-in
// headers declare a subset of the real ACL API with the real prototypes, so
// code compiled against them compiles unchanged against CANN's headers;
// test/test_sim_surface.py enforces that against every cached torch_npu wheel.
#pragma once
#include "acl/acl_base.h"
#include "acl/acl_rt.h"
