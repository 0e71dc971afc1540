// Fixed-order float32 kernels for exact mode on CPU (exact_kernels="ordered"), as XLA FFI
// custom calls. Built and loaded by agentjax/policy/ordered.py.
//
// Each kernel defines the order of every sum it computes, per output element, by its own
// arithmetic, and every code path (vector width, row or column tail, thread split) performs
// exactly that sequence of IEEE operations. So an element's result is a function of its own row
// (and column) only: never of the batch size, of its position in the batch, or of the machine's
// SIMD width. Compiled with -ffp-contract=off: the only fused multiply-adds are the explicit ones.
//
//   agentjax_ordered_dot:    C[b, i, j] = fma chain over k = 0..K-1 of A[b, i, k] * B[b, k, j],
//                            starting from +0. Zero terms leave the chain unchanged, so padding
//                            (masked keys in attention) may sit anywhere along k.
//   agentjax_ordered_rms_norm, _softmax, _swiglu: row and elementwise kernels whose sums run in
//                            16 lanes (lane l adds x[r, j] for j = l mod 16, ascending; the lanes
//                            then combine in a fixed tree) and whose exp is the kernel's own.
#include <algorithm>
#include <atomic>
#include <memory>
#include <cmath>
#include <cstdint>
#include <utility>
#include <thread>
#include <vector>

#include "xla/ffi/api/ffi.h"

#if defined(__SSE__)
#include <immintrin.h>
#endif

namespace ffi = xla::ffi;

namespace {

// One SIMD register of W float lanes; `fma` is one correctly rounded a * b + c per lane.
#if defined(__AVX512F__)
struct V {
  using T = __m512;
  static constexpr int W = 16;
  static __mmask16 m(int n) { return (__mmask16)((1u << n) - 1); }
  static T zero() { return _mm512_setzero_ps(); }
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static T loadn(const float* p, int n) { return _mm512_maskz_loadu_ps(m(n), p); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static void storen(float* p, T v, int n) { _mm512_mask_storeu_ps(p, m(n), v); }
  static T bcast(float x) { return _mm512_set1_ps(x); }
  static T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
};
#elif defined(__AVX2__) && defined(__FMA__)
struct V {
  using T = __m256;
  static constexpr int W = 8;
  static __m256i m(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static T zero() { return _mm256_setzero_ps(); }
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static T loadn(const float* p, int n) { return _mm256_maskload_ps(p, m(n)); }
  static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
  static void storen(float* p, T v, int n) { _mm256_maskstore_ps(p, m(n), v); }
  static T bcast(float x) { return _mm256_set1_ps(x); }
  static T fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
};
#else
struct V {
  using T = float;
  static constexpr int W = 1;
  static T zero() { return 0.0f; }
  static T load(const float* p) { return *p; }
  static T loadn(const float* p, int) { return *p; }
  static void store(float* p, T v) { *p = v; }
  static void storen(float* p, T v, int) { *p = v; }
  static T bcast(float x) { return x; }
  static T fma(T a, T b, T c) { return std::fmaf(a, b, c); }
};
#endif

// Runs fn(0..parts-1) on the caller and XLA's intra-op thread pool, when the work pays for it.
// Parts are claimed from a shared counter, so the caller never waits on a task the pool has not
// started; a task that starts late finds nothing left and touches only the shared counters.
template <class F>
void parallel(ffi::ThreadPool& pool, double work, int64_t parts, F fn) {
  int64_t nt = work > 2e6 ? std::min<int64_t>(parts, pool.num_threads() + 1) : 1;
  if (nt <= 1) {
    for (int64_t p = 0; p < parts; ++p) fn(p);
    return;
  }
  struct Counters {
    std::atomic<int64_t> next{0}, done{0};
  };
  auto c = std::make_shared<Counters>();
  auto run = [c, parts, &fn] {
    for (int64_t p; (p = c->next.fetch_add(1)) < parts; c->done.fetch_add(1)) fn(p);
  };
  for (int64_t t = 1; t < nt; ++t) pool.Schedule([c, parts, run] { run(); });
  run();
  while (c->done.load() < parts) std::this_thread::yield();
}

// Fixes the floating-point environment (round to nearest, subnormals flushed) for the calling
// thread while it lives: XLA's threads and ours must not differ in it.
struct FpMode {
#if defined(__SSE__)
  unsigned saved = _mm_getcsr();
  FpMode() { _mm_setcsr((saved & ~0x6000u) | 0x8040u); }
  ~FpMode() { _mm_setcsr(saved); }
#endif
};

// Rows i..i+R of C = A B for the cols (<= 2W; FULL: == 2W) columns at C and B, in registers;
// every element's chain runs k = 0..K-1. Partial columns load zeros and are not stored.
template <int R, bool FULL>
void tile(const float* A, const float* B, float* C, int64_t i, int cols, int64_t K, int64_t ldb, int64_t N) {
  typename V::T acc0[R], acc1[R];
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = V::zero();
  const int n0 = FULL ? V::W : std::min(cols, V::W), n1 = FULL ? V::W : cols - n0;
  const float* a = A + i * K;
  const float* b = B;
  for (int64_t k = 0; k < K; ++k, b += ldb) {
    typename V::T b0 = FULL ? V::load(b) : V::loadn(b, n0);
    typename V::T b1 = FULL ? V::load(b + V::W) : (n1 > 0 ? V::loadn(b + V::W, n1) : V::zero());
    for (int r = 0; r < R; ++r) {
      typename V::T x = V::bcast(a[r * K + k]);
      acc0[r] = V::fma(x, b0, acc0[r]);
      acc1[r] = V::fma(x, b1, acc1[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float* c = C + (i + r) * N;
    if (FULL) {
      V::store(c, acc0[r]);
      V::store(c + V::W, acc1[r]);
    } else {
      V::storen(c, acc0[r], n0);
      if (n1 > 0) V::storen(c + V::W, acc1[r], n1);
    }
  }
}

constexpr int ROWS = V::W == 16 ? 8 : (V::W == 8 ? 6 : 4);

// Rows i0..i1 of the column panel j..j+cols of C; the panel's rows are ldb floats apart.
void dot_panel(const float* A, const float* Bp, float* C, int64_t i0, int64_t i1, int64_t j, int cols, int64_t K,
               int64_t ldb, int64_t N) {
  int64_t i = i0;
  if (cols == 2 * V::W) {
    for (; i + ROWS <= i1; i += ROWS) tile<ROWS, true>(A, Bp, C + j, i, cols, K, ldb, N);
    for (; i < i1; ++i) tile<1, true>(A, Bp, C + j, i, cols, K, ldb, N);
  } else {
    for (; i + ROWS <= i1; i += ROWS) tile<ROWS, false>(A, Bp, C + j, i, cols, K, ldb, N);
    for (; i < i1; ++i) tile<1, false>(A, Bp, C + j, i, cols, K, ldb, N);
  }
}

void dot_rows(const float* A, const float* B, float* C, int64_t i0, int64_t i1, int64_t K, int64_t N) {
  std::vector<float> panel;
  for (int64_t j = 0; j < N; j += 2 * V::W) {  // a panel of B stays in cache across the rows
    int cols = (int)std::min<int64_t>(2 * V::W, N - j);
    if (N > 2 * V::W && i1 - i0 > 2 * ROWS) {  // copied contiguous: rows N floats apart alias in cache
      panel.assign(K * 2 * V::W, 0.0f);
      for (int64_t k = 0; k < K; ++k) std::copy(B + k * N + j, B + k * N + j + cols, panel.data() + k * 2 * V::W);
      dot_panel(A, panel.data(), C, i0, i1, j, cols, K, 2 * V::W, N);
    } else {
      dot_panel(A, B + j, C, i0, i1, j, cols, K, N, N);
    }
  }
}


ffi::Error OrderedDot(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> a, ffi::Buffer<ffi::F32> b,
                      ffi::ResultBuffer<ffi::F32> c) {
  auto ad = a.dimensions(), bd = b.dimensions(), cd = c->dimensions();
  if (ad.size() != 3 || bd.size() != 3 || cd.size() != 3 || ad[2] != bd[1] || cd[1] != ad[1] ||
      cd[2] != bd[2] || (ad[0] != cd[0] && ad[0] != 1) || (bd[0] != cd[0] && bd[0] != 1))
    return ffi::Error::InvalidArgument("agentjax_ordered_dot: expects [Ba, M, K] x [Bb, K, N] -> [B, M, N]");
  const int64_t batch = cd[0], M = ad[1], K = ad[2], N = bd[2];
  const int64_t sa = ad[0] == 1 ? 0 : M * K, sb = bd[0] == 1 ? 0 : K * N;
  const float *A = a.typed_data(), *B = b.typed_data();
  float* C = c->typed_data();
  // parts of >= 128 rows of one product; threads split parts, so no element's chain changes.
  const int64_t per = std::max<int64_t>(1, std::min<int64_t>(16, M / 128)), chunk = (M + per - 1) / per;
  parallel(pool, double(batch) * M * K * N, batch * per, [&](int64_t part) {
    FpMode mode;
    const int64_t s = part / per, i0 = (part % per) * chunk, i1 = std::min(M, i0 + chunk);
    if (i0 < i1) dot_rows(A + s * sa, B + s * sb, C + s * M * N, i0, i1, K, N);
  });
  return ffi::Error::Success();
}

// Elementwise and row kernels: plain loops of IEEE operations (the compiler vectorises them;
// -ffp-contract=off keeps every lane's and the scalar tail's operations the same).

// exp(x) with its own fixed sequence of operations (Cephes' expf polynomial): XLA's exp differs
// between its own code and the libraries it hands fusions to (measured: exp(z - max z) on
// [96, 64] rows went to YNNPACK and changed row 2's values against the [3, 64] call).
inline float exp_f(float x) {
  const float big = 12582912.0f;  // 1.5 * 2^23: (v + big) - big rounds v to the nearest integer
  float xc = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  float fx = (xc * 1.44269504088896341f + big) - big;
  float r = std::fmaf(fx, -0.693359375f, xc);
  r = std::fmaf(fx, 2.12194440e-4f, r);
  float y = 1.9875691500e-4f;
  y = std::fmaf(y, r, 1.3981999507e-3f);
  y = std::fmaf(y, r, 8.3334519073e-3f);
  y = std::fmaf(y, r, 4.1665795894e-2f);
  y = std::fmaf(y, r, 1.6666665459e-1f);
  y = std::fmaf(y, r, 5.0000001201e-1f);
  y = std::fmaf(y, r * r, r) + 1.0f;
  union { int32_t i; float f; } scale = {((int32_t)fx + 127) << 23};  // 2^fx, fx in [-126, 127]
  float out = y * scale.f;
  out = x < -87.0f ? 0.0f : out;
  return x > 88.0f ? INFINITY : out;
}

// Sum of x[0..n) in 16 lanes (lane l adds x[j], j = l mod 16, ascending), then a fixed tree.
inline float lane_sum(const float* x, int64_t n) {
  float lane[16] = {0};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int l = 0; l < 16; ++l) lane[l] += x[j + l];
  for (int l = 0; j + l < n; ++l) lane[l] += x[j + l];
  for (int w = 8; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) lane[l] += lane[l + w];
  return lane[0];
}

inline float row_max(const float* x, int64_t n) {  // exact in any order
  float lane[16];
  for (int l = 0; l < 16; ++l) lane[l] = -INFINITY;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int l = 0; l < 16; ++l) lane[l] = x[j + l] > lane[l] ? x[j + l] : lane[l];
  for (int l = 0; j + l < n; ++l) lane[l] = x[j + l] > lane[l] ? x[j + l] : lane[l];
  float m = lane[0];
  for (int l = 1; l < 16; ++l) m = lane[l] > m ? lane[l] : m;
  return m;
}

template <class F>
void rows(ffi::ThreadPool& pool, int64_t R, int64_t n, double cost, F fn) {
  const int64_t parts = std::min<int64_t>(R, 16), chunk = (R + parts - 1) / parts;
  parallel(pool, double(R) * n * cost, parts, [&](int64_t part) {
    FpMode mode;
    for (int64_t r = part * chunk; r < std::min(R, (part + 1) * chunk); ++r) fn(r);
  });
}

template <class D>
std::pair<int64_t, int64_t> rows_cols(const D& d) {
  int64_t n = d.size() == 0 ? 1 : d[d.size() - 1], R = 1;
  for (size_t i = 0; i + 1 < d.size(); ++i) R *= d[i];
  return {R, n};
}

// y = x * (1 / sqrt(sum(x^2) / n + eps)) * scale, per row.
ffi::Error RmsNorm(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> scale, ffi::ResultBuffer<ffi::F32> y,
                   float eps) {
  auto [R, n] = rows_cols(x.dimensions());
  const float *X = x.typed_data(), *S = scale.typed_data();
  float* Y = y->typed_data();
  rows(pool, R, n, 4, [&](int64_t r) {
    const float* xr = X + r * n;
    float* yr = Y + r * n;
    for (int64_t j = 0; j < n; ++j) yr[j] = xr[j] * xr[j];
    float inv = 1.0f / std::sqrt(lane_sum(yr, n) / (float)n + eps);
    for (int64_t j = 0; j < n; ++j) yr[j] = (xr[j] * inv) * S[j];
  });
  return ffi::Error::Success();
}

// mode 0: log-softmax; 1: softmax; 2: exp(z - max z) (attention's numerators). -inf -> 0 weight.
ffi::Error Softmax(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> z, ffi::ResultBuffer<ffi::F32> out, int32_t mode) {
  auto [R, n] = rows_cols(z.dimensions());
  const float* Z = z.typed_data();
  float* O = out->typed_data();
  rows(pool, R, n, 16, [&](int64_t r) {
    const float* zr = Z + r * n;
    float* o = O + r * n;
    float m = row_max(zr, n);
    for (int64_t j = 0; j < n; ++j) o[j] = exp_f(zr[j] - m);
    if (mode == 2) return;
    float s = lane_sum(o, n);
    if (mode == 1) {
      for (int64_t j = 0; j < n; ++j) o[j] = o[j] / s;
      return;
    }
    float ls = std::log(s);  // one call per row: glibc's logf, the same code for every row
    for (int64_t j = 0; j < n; ++j) o[j] = (zr[j] - m) - ls;
  });
  return ffi::Error::Success();
}

// h = g / (1 + exp(-g)) * u (SwiGLU's gate), elementwise.
ffi::Error Swiglu(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> g, ffi::Buffer<ffi::F32> u, ffi::ResultBuffer<ffi::F32> h) {
  auto [R, n] = rows_cols(g.dimensions());
  const float *G = g.typed_data(), *U = u.typed_data();
  float* H = h->typed_data();
  rows(pool, R, n, 16, [&](int64_t r) {
    for (int64_t j = r * n; j < (r + 1) * n; ++j) H[j] = G[j] / (1.0f + exp_f(-G[j])) * U[j];
  });
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(AgentjaxOrderedDot, OrderedDot,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(AgentjaxOrderedRmsNorm, RmsNorm,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<float>("eps"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(AgentjaxOrderedSoftmax, Softmax,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int32_t>("mode"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(AgentjaxOrderedSwiglu, Swiglu,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
