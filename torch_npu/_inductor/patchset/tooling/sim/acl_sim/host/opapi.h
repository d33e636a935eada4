// HOST ACL LIBRARY (a test double of CANN for torch-npu-inductor-patches' tests, never in a user's
// process; see README.md): what host_acl.cpp and opapi.cpp share. Internal: nothing here is exported.
#pragma once
#include <sstream>
#include <string>

namespace acl_host {
// aclGetRecentErrMsg's text for this thread (host_acl.cpp keeps it).
void recent_error(const std::string &msg);
// The "operators" field of the report (opapi.cpp): one record per operator run on a stream.
void opapi_report_json(std::ostringstream &o);
// Forgets the operator runs (acl_host_reset); live tensors, scalars and executors stay.
void opapi_reset();
}  // namespace acl_host
