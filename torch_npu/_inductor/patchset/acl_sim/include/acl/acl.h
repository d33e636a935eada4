// HOST SIMULATION of the Ascend ACL runtime: a test double and dry-run tool for
// torch-npu-inductor-patches. It is NOT CANN and runs no NPU code. It declares
// only the small subset of the public ACL API that this project uses, with the
// public names and prototypes, so that code compiled against it compiles
// unchanged against the real CANN headers.
#pragma once
#include "acl/acl_rt.h"
