/// Kernel context, broadcasting and the GEMM shared by the kernels.
#include "KernelUtil.h"

#include <algorithm>
#include <cblas.h>
#include <cstdlib>
#include <limits>
#include <vector>

#include "fusec/engine/Error.h"

namespace fusec::interp {

const Tensor& KernelContext::in(size_t i) const {
  if (!has(i)) fail("operand " + std::to_string(i) + " is required but missing");
  return *inputs_[i];
}

void KernelContext::fail(const std::string& message) const { throw UserError{message, false}; }

void KernelContext::unsupported(const std::string& message) const {
  throw UserError{message, true};
}

namespace {
template <class T>
const T* attrAs(const KernelContext& ctx, const NodeData& node, const std::string& name,
                const char* kind) {
  const Attribute* a = node.attr(name);
  if (!a) return nullptr;
  const T* v = std::get_if<T>(a);
  if (!v) ctx.fail("attribute `" + name + "` must be " + kind);
  return v;
}
}  // namespace

int64_t KernelContext::attrInt(const std::string& name, int64_t def) const {
  const int64_t* v = attrAs<int64_t>(*this, node_, name, "an int");
  return v ? *v : def;
}

float KernelContext::attrFloat(const std::string& name, float def) const {
  const Attribute* a = node_.attr(name);
  if (a && std::holds_alternative<int64_t>(*a)) return static_cast<float>(std::get<int64_t>(*a));
  const float* v = attrAs<float>(*this, node_, name, "a float");
  return v ? *v : def;
}

std::string KernelContext::attrString(const std::string& name, const std::string& def) const {
  const std::string* v = attrAs<std::string>(*this, node_, name, "a string");
  return v ? *v : def;
}

std::vector<int64_t> KernelContext::attrInts(const std::string& name, std::vector<int64_t> def) const {
  const auto* v = attrAs<std::vector<int64_t>>(*this, node_, name, "a list of ints");
  return v ? *v : def;
}

std::vector<float> KernelContext::attrFloats(const std::string& name, std::vector<float> def) const {
  const auto* v = attrAs<std::vector<float>>(*this, node_, name, "a list of floats");
  return v ? *v : def;
}

const Tensor* KernelContext::attrTensor(const std::string& name) const {
  return attrAs<Tensor>(*this, node_, name, "a tensor");
}

int64_t normalizeAxis(const KernelContext& ctx, int64_t axis, int64_t rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    ctx.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return a;
}

Shape broadcastShapes(const KernelContext& ctx, const std::vector<Shape>& shapes) {
  size_t rank = 0;
  for (const Shape& s : shapes) rank = std::max(rank, s.size());
  Shape out(rank, 1);
  for (const Shape& s : shapes) {
    size_t off = rank - s.size();
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[off + i];
      if (s[i] == o || s[i] == 1) continue;
      if (o == 1) {
        o = s[i];
        continue;
      }
      std::string msg = "operand shapes cannot be broadcast together:";
      for (const Shape& x : shapes) {
        msg += ' ';
        msg += shapeToString(x);
      }
      ctx.fail(msg);
    }
  }
  return out;
}

Shape broadcastStrides(const Shape& in, const Shape& out) {
  Shape strides(out.size(), 0);
  Shape own = stridesOf(in);
  size_t off = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) strides[off + i] = in[i] == 1 ? 0 : own[i];
  return strides;
}

void expectDType(const KernelContext& ctx, size_t i, DType t) {
  DType got = ctx.in(i).dtype();
  if (got != t)
    ctx.unsupported("operand " + std::to_string(i) + " must be `" + std::string(dtypeName(t)) +
             "`, got `" + std::string(dtypeName(got)) + "`");
}

std::vector<int64_t> intsOf(const Tensor& t) {
  if (t.dtype() != DType::Int64 && t.dtype() != DType::Int32)
    throw UserError{"expected an int64 tensor, got `" + std::string(dtypeName(t.dtype())) + "`"};
  return t.toInt64s();
}

namespace {

/// The blocked loop, for matrices whose dims do not fit BLAS's int.
void loopGemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float* A, const float* B,
              float beta, float* C) {
  // Bring both operands to row-major MxK and KxN, then run an i-k-j loop
  // blocked over k and j so the inner loop streams contiguous rows.
  std::vector<float> at, bt;
  if (transA) {
    at.resize(static_cast<size_t>(M * K));
    for (int64_t k = 0; k < K; ++k)
      for (int64_t i = 0; i < M; ++i) at[i * K + k] = A[k * M + i];
    A = at.data();
  }
  if (transB) {
    bt.resize(static_cast<size_t>(K * N));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) bt[k * N + n] = B[n * K + k];
    B = bt.data();
  }
  for (int64_t i = 0; i < M * N; ++i) C[i] = beta == 0.f ? 0.f : C[i] * beta;
  constexpr int64_t kBlockK = 256, kBlockN = 512;
  for (int64_t k0 = 0; k0 < K; k0 += kBlockK) {
    const int64_t k1 = std::min(K, k0 + kBlockK);
    for (int64_t j0 = 0; j0 < N; j0 += kBlockN) {
      const int64_t j1 = std::min(N, j0 + kBlockN);
      for (int64_t i = 0; i < M; ++i) {
        float* c = C + i * N;
        for (int64_t k = k0; k < k1; ++k) {
          const float a = alpha * A[i * K + k];
          const float* b = B + k * N;
          for (int64_t j = j0; j < j1; ++j) c[j] += a * b[j];
        }
      }
    }
  }
}

}  // namespace

extern "C" void openblas_set_num_threads(int);  // libopenblas, which CMake links (BLA_VENDOR OpenBLAS)

void gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float* A, const float* B,
          float beta, float* C) {
  if (M <= 0 || N <= 0) return;
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  if (M > kIntMax || N > kIntMax || K > kIntMax) return loopGemm(transA, transB, M, N, K, alpha, A, B, beta, C);
  // OpenBLAS (Debian's libopenblas-dev), blocked for the machine's caches.
  // One thread unless OPENBLAS_NUM_THREADS says otherwise: its threads
  // spin while they wait, and on a busy machine (tests run in parallel, a
  // device runtime's workers) BERT-base's reference took 2.6x longer with
  // two threads than with one on the 2-core build host.
  static const bool threads = (std::getenv("OPENBLAS_NUM_THREADS") || (openblas_set_num_threads(1), true));
  (void)threads;
  const int m = static_cast<int>(M), n = static_cast<int>(N), k = static_cast<int>(K);
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans, m, n, k, alpha, A,
              std::max(1, transA ? m : k), B, std::max(1, transB ? k : n), beta, C, n);
}

void requireSteps(const KernelContext& ctx, std::initializer_list<std::optional<int64_t>> factors,
                  const std::string& what) {
  static const int64_t limit = limitFromEnv("FUSEC_MAX_INTERPRETER_STEPS", int64_t{1} << 32);
  int64_t steps = 1;
  for (const std::optional<int64_t>& f : factors)
    if (!f || __builtin_mul_overflow(steps, *f, &steps) || steps > limit)
      ctx.fail(what + " is more than " + std::to_string(limit) + " steps (FUSEC_MAX_INTERPRETER_STEPS)");
}

}  // namespace fusec::interp
