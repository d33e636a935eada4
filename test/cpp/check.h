// The C++ tests' own framework, shared by both builds (sim_support.h: the simulation's self-tests, one
// process per case through ctest; real_support.h: the helper's tests on a wheel's own torch_npu, run by
// name in one child per TASK_QUEUE_ENABLE value). TEST_CASE(name) registers a case as
// "<file stem>.<name>"; TEST_CASE_QUEUES(name, "10") also says which TASK_QUEUE_ENABLE values it runs
// with (default "1"; a "!" runs it last in its child: it stops torch_npu's queue). CHECK* throw Failure with
// the file, line and values.
#pragma once
#include <cstring>
#include <exception>
#include <initializer_list>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace t {

struct Case {
  std::string name;    // "<file stem>.<case>"
  std::string queues;  // TASK_QUEUE_ENABLE values, one character each
  void (*fn)();
};
inline std::vector<Case> &cases() {
  static std::vector<Case> v;
  return v;
}
inline std::string file_stem(const char *file) {
  const char *slash = std::strrchr(file, '/');
  std::string s = slash != nullptr ? slash + 1 : file;
  return s.substr(0, s.rfind('.'));
}
struct Reg {
  Reg(const char *file, const char *n, const char *queues, void (*f)()) {
    cases().push_back(Case{file_stem(file) + "." + n, queues, f});
  }
};
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] inline void fail(const char *file, int line, const std::string &what) {
  std::ostringstream o;
  o << file_stem(file) << ".cpp:" << line << ": CHECK failed: " << what;
  throw Failure(o.str());
}
// Fails unless `text` contains every one of `parts`.
inline void check_message(const char *file, int line, const std::string &text,
                          std::initializer_list<const char *> parts) {
  for (const char *part : parts)
    if (text.find(part) == std::string::npos) fail(file, line, "message '" + text + "' lacks '" + part + "'");
}

}  // namespace t

#define TEST_CASE_QUEUES(name, queues)                                   \
  static void name();                                                    \
  static ::t::Reg reg_##name##_instance(__FILE__, #name, queues, &name); \
  static void name()
#define TEST_CASE(name) TEST_CASE_QUEUES(name, "1")

#define CHECK(cond)                                    \
  do {                                                 \
    if (!(cond)) ::t::fail(__FILE__, __LINE__, #cond); \
  } while (0)
#define CHECK_MSG(cond, msg)                   \
  do {                                         \
    if (!(cond)) {                             \
      std::ostringstream o_;                   \
      o_ << #cond << " -- " << msg;            \
      ::t::fail(__FILE__, __LINE__, o_.str()); \
    }                                          \
  } while (0)
#define CHECK_EQ(a, b)                                                 \
  do {                                                                 \
    auto va_ = (a);                                                    \
    auto vb_ = (b);                                                    \
    if (!(va_ == vb_)) {                                               \
      std::ostringstream o_;                                           \
      o_ << #a << " == " << #b << " (" << va_ << " vs " << vb_ << ")"; \
      ::t::fail(__FILE__, __LINE__, o_.str());                         \
    }                                                                  \
  } while (0)
// Checks that `expr` throws `type` whose what() contains every string in the list.
#define CHECK_THROWS(expr, type, ...)                                           \
  do {                                                                          \
    bool thrown_ = false;                                                       \
    try {                                                                       \
      (void)(expr);                                                             \
    } catch (const type &e_) {                                                  \
      thrown_ = true;                                                           \
      ::t::check_message(__FILE__, __LINE__, e_.what(), {__VA_ARGS__});         \
    }                                                                           \
    if (!thrown_) ::t::fail(__FILE__, __LINE__, #expr " did not throw " #type); \
  } while (0)
