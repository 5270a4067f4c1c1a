#include <volt/tensor/random.h>

#include <cmath>
#include <mutex>

#include <volt/tensor/error.h>
#include <volt/tensor/rng_barrier.h>

namespace volt {

#include <volt/tensor/philox.inc>

namespace {
std::mutex g_mutex;
PhiloxState g_state{0, 0};
thread_local const char* t_barrier_who = nullptr;  // set by a GlobalRngBarrier
thread_local const char* t_barrier_why = nullptr;

void check_barrier() {
  if (t_barrier_who) VOLT_FAIL(t_barrier_who, t_barrier_why);
}
}  // namespace

GlobalRngBarrier::GlobalRngBarrier(const char* who, const char* why)
    : prev_who_(t_barrier_who), prev_why_(t_barrier_why) {
  t_barrier_who = who;
  t_barrier_why = why;
}
GlobalRngBarrier::~GlobalRngBarrier() {
  t_barrier_who = prev_who_;
  t_barrier_why = prev_why_;
}

void manual_seed(uint64_t seed) {
  check_barrier();
  std::lock_guard<std::mutex> lock(g_mutex);
  g_state = {seed, 0};
}

PhiloxState rng_state() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_state;
}

void set_rng_state(PhiloxState s) {
  check_barrier();
  std::lock_guard<std::mutex> lock(g_mutex);
  g_state = s;
}

PhiloxState rng_reserve(uint64_t n) {
  check_barrier();
  std::lock_guard<std::mutex> lock(g_mutex);
  PhiloxState s = g_state;
  g_state.offset += n;
  return s;
}

void philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
  volt_u32x4 c{counter[0], counter[1], counter[2], counter[3]};
  volt_u32x4 r = volt_philox(c, key[0], key[1]);
  out[0] = r.x;
  out[1] = r.y;
  out[2] = r.z;
  out[3] = r.w;
}

float philox_uniform(uint64_t seed, uint64_t offset, uint64_t i) {
  return volt_uniform_f32(seed, offset, i);
}

double philox_uniform_f64(uint64_t seed, uint64_t offset, uint64_t i) {
  return volt_uniform_f64(seed, offset, i);
}

double philox_normal(uint64_t seed, uint64_t offset, uint64_t i) {
  volt_u32x4 r = volt_philox_at(seed, offset, i);
  // Two uniforms from one block; u1 in (0, 1] so the log is finite.
  double u1 = (static_cast<double>(r.x) + 1.0) / 4294967296.0;
  double u2 = static_cast<double>(r.y) / 4294967296.0;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

// Used by the CPU backend.
float philox_uniform_range_f32(uint64_t seed, uint64_t offset, uint64_t i, float lo, float hi) {
  return volt_uniform_range_f32(seed, offset, i, lo, hi);
}
double philox_uniform_range_f64(uint64_t seed, uint64_t offset, uint64_t i, double lo, double hi) {
  return volt_uniform_range_f64(seed, offset, i, lo, hi);
}

}  // namespace volt
