// Contrast with the released upstream fix (torch_npu 2.7.1.post11 .. 2.14.0, docs/design.md: two requests of
// torch_npu's workspace allocator, a host std::vector, a synchronous aclrtMemcpy): in the scenarios where its
// locks and workspace alias, its workspace dangles after the allocator grew, and a running kernel's locks
// change, the helper is clean on the wheel's own runtime. What upstream's own launchers get on theirs is
// test/test_real_runtime.py's (test_as_shipped_own_allocation_aliases_copies_and_grows_on_the_queue_thread:
// 2.7.1.post11, 2.13.0; 2.7.1.post10's allocate_workspace hands a raw stream's caller an empty tensor).
#include "real_support.h"

using namespace t;

TEST_CASE(helper_is_clean_in_the_same_scenarios) {
  const Counters c0 = counters();
  // aliasing scenario
  aclrtFuncHandle h = probe("helper", 4 * 8, 4 * 1024);
  uint64_t id = helper_launch("helper", h, stream(0), 4, 1, 1, 4, 1024, legacy(4, 7));
  // growth scenario
  aclrtFuncHandle big = probe("helper_big", 3u << 20, 1024);
  uint64_t id2 = helper_launch("helper_big", big, stream(0), 1, 1, 1, 1, 1024, legacy((3u << 20) / 8, 0));
  // running-kernel scenario: the second launch comes while the first kernel has not finished (the stream held)
  aclrtFuncHandle slow = probe("first", 4 * 8, 0, 20000);
  aclrtFuncHandle second = probe("second", 4 * 8, 0);
  StreamHold hold(stream(0));
  uint64_t a = helper_launch("first", slow, stream(0), 1, 1, 1, 1, 0, legacy(4, 7));
  ProbeRecord tmp;
  const bool first_done_when_second_issued = probe_record(a, &tmp);
  helper_launch("second", second, stream(0), 1, 1, 1, 1, 0, legacy(4, 9));
  hold.release();
  sync(stream(0));
  CHECK(!first_done_when_second_issued);  // precondition (the hold): the first kernel had not run
  CHECK(!record(id).regions_overlap && record(id).locks_unchanged);
  CHECK(record(id2).workspace_written);
  CHECK(record(a).locks_unchanged);
  CHECK_EQ(counters().sync_copies, c0.sync_copies);
  CHECK_NO_SIM_ERRORS();
}
