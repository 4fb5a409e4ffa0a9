// GEMM smoke test on rocBLAS: FP32, FP16 and BF16 GEMMs checked against a float64 CPU reference,
// TFLOPS per dtype, and device memory bandwidth from a copy kernel. Prints one JSON object.
// The copy kernel's launches are checked (hipGetLastError) and its dst compared with src.
// Exit codes: 0 all checks passed, 1 a check failed, 3 no usable GPU (not GPU-verified).
#include <hip/hip_runtime.h>
#include <rocblas/rocblas.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

static void no_gpu(const char* why, int code) {
  std::printf("{\"status\": \"no-gpu\", \"reason\": \"%s\", \"hip_error\": %d}\n", why, code);
  std::exit(3);
}

#define HIP_OK(x) do { hipError_t e_ = (x); if (e_ != hipSuccess) { \
  std::printf("{\"status\": \"error\", \"call\": \"%s\", \"hip_error\": \"%s\"}\n", #x, hipGetErrorString(e_)); \
  std::exit(1); } } while (0)
#define BLAS_OK(x) do { rocblas_status s_ = (x); if (s_ != rocblas_status_success) { \
  std::printf("{\"status\": \"error\", \"call\": \"%s\", \"rocblas_status\": \"%s\"}\n", #x, rocblas_status_to_string(s_)); \
  std::exit(1); } } while (0)

__global__ void copy_kernel(const float4* __restrict__ in, float4* __restrict__ out, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (; i < n; i += stride) out[i] = in[i];
}

// A pattern no memset produces, so a copy that never ran cannot match it.
__device__ __host__ inline float4 pattern(size_t i) {
  return make_float4((float)(i & 0xffff), (float)(i >> 16), (float)(i % 7919), 1.0f);
}

__global__ void fill_kernel(float4* __restrict__ out, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  for (size_t stride = (size_t)gridDim.x * blockDim.x; i < n; i += stride) out[i] = pattern(i);
}

__global__ void count_mismatches(const float4* __restrict__ a, const float4* __restrict__ b, size_t n,
                                 unsigned long long* bad) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  unsigned long long mine = 0;
  for (size_t stride = (size_t)gridDim.x * blockDim.x; i < n; i += stride) {
    float4 x = a[i], y = b[i];
    mine += (x.x != y.x) | (x.y != y.y) | (x.z != y.z) | (x.w != y.w);
  }
  if (mine) atomicAdd(bad, mine);
}

// A kernel launch reports its errors (no code object for this GPU, bad configuration) only
// through hipGetLastError: without the check a launch that never ran would time as "fast".
#define LAUNCH_OK(kernel) do { hipError_t e_ = hipGetLastError(); if (e_ != hipSuccess) { \
  std::printf("{\"status\": \"error\", \"call\": \"%s launch\", \"hip_error\": \"%s\"}\n", kernel, hipGetErrorString(e_)); \
  std::exit(1); } } while (0)

// Conversions by bit manipulation so the host side needs no half/bfloat headers.
static uint16_t to_half(float f) {
  uint32_t x; std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000, mant = x & 0x7fffff; int exp = ((x >> 23) & 0xff) - 127 + 15;
  if (exp <= 0) return (uint16_t)sign;
  if (exp >= 31) return (uint16_t)(sign | 0x7c00);
  uint32_t h = sign | (exp << 10) | (mant >> 13);
  if (mant & 0x1000) h++;  // round half up: adequate for test data
  return (uint16_t)h;
}
static float from_half(uint16_t h) {
  uint32_t sign = (h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, x;
  if (exp == 0) x = sign; else if (exp == 31) x = sign | 0x7f800000 | (mant << 13);
  else x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  float f; std::memcpy(&f, &x, 4); return f;
}
static uint16_t to_bf16(float f) { uint32_t x; std::memcpy(&x, &f, 4); x += 0x7fff + ((x >> 16) & 1); return (uint16_t)(x >> 16); }
static float from_bf16(uint16_t b) { uint32_t x = (uint32_t)b << 16; float f; std::memcpy(&f, &x, 4); return f; }

struct Result { double max_rel_err; double tflops; bool ok; };

// Column-major C = A * B with n x n matrices; only sampled entries are checked in float64.
template <typename T>
static Result run_gemm(rocblas_handle h, int n, int iters, rocblas_datatype dt, float (*from)(T), T (*to)(float), double tol) {
  std::mt19937 rng(42); std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<T> a((size_t)n * n), b((size_t)n * n), c((size_t)n * n);
  std::vector<float> af(a.size()), bf(b.size());
  for (size_t i = 0; i < a.size(); ++i) { a[i] = to(u(rng)); af[i] = from(a[i]); b[i] = to(u(rng)); bf[i] = from(b[i]); }
  T *da, *db, *dc; size_t bytes = a.size() * sizeof(T);
  HIP_OK(hipMalloc(&da, bytes)); HIP_OK(hipMalloc(&db, bytes)); HIP_OK(hipMalloc(&dc, bytes));
  HIP_OK(hipMemcpy(da, a.data(), bytes, hipMemcpyHostToDevice));
  HIP_OK(hipMemcpy(db, b.data(), bytes, hipMemcpyHostToDevice));
  float alpha = 1.f, beta = 0.f;
  auto call = [&]() {
    BLAS_OK(rocblas_gemm_ex(h, rocblas_operation_none, rocblas_operation_none, n, n, n, &alpha, da, dt, n, db, dt, n,
                            &beta, dc, dt, n, dc, dt, n, rocblas_datatype_f32_r, rocblas_gemm_algo_standard, 0, 0));
  };
  call(); HIP_OK(hipDeviceSynchronize());
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) call();
  HIP_OK(hipDeviceSynchronize());
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  HIP_OK(hipMemcpy(c.data(), dc, bytes, hipMemcpyDeviceToHost));
  double worst = 0;
  for (int s = 0; s < 64; ++s) {
    int i = (s * 7919) % n, j = (s * 104729) % n; double ref = 0, mag = 0;
    for (int k = 0; k < n; ++k) { double p = (double)af[i + (size_t)k * n] * bf[k + (size_t)j * n]; ref += p; mag += std::fabs(p); }
    double err = std::fabs(from(c[i + (size_t)j * n]) - ref) / (mag > 0 ? mag : 1.0);
    if (err > worst) worst = err;
  }
  HIP_OK(hipFree(da)); HIP_OK(hipFree(db)); HIP_OK(hipFree(dc));
  return {worst, 2.0 * n * (double)n * n * iters / secs / 1e12, worst <= tol};
}

static float id_f(float x) { return x; }

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 8192, iters = argc > 2 ? std::atoi(argv[2]) : 10;
  int count = 0; hipError_t e = hipGetDeviceCount(&count);
  if (e != hipSuccess || count == 0) no_gpu(e != hipSuccess ? hipGetErrorString(e) : "no devices", (int)e);
  hipDeviceProp_t prop; HIP_OK(hipGetDeviceProperties(&prop, 0));
  rocblas_handle h; BLAS_OK(rocblas_create_handle(&h));
  Result f32 = run_gemm<float>(h, n, iters, rocblas_datatype_f32_r, id_f, id_f, 1e-5);
  Result f16 = run_gemm<uint16_t>(h, n, iters, rocblas_datatype_f16_r, from_half, to_half, 1e-2);
  Result b16 = run_gemm<uint16_t>(h, n, iters, rocblas_datatype_bf16_r, from_bf16, to_bf16, 5e-2);
  size_t nvec = (size_t)1 << 26;  // 1 GiB per buffer
  float4 *src, *dst; HIP_OK(hipMalloc(&src, nvec * sizeof(float4))); HIP_OK(hipMalloc(&dst, nvec * sizeof(float4)));
  fill_kernel<<<4096, 256>>>(src, nvec); LAUNCH_OK("fill_kernel");
  HIP_OK(hipMemset(dst, 0xff, nvec * sizeof(float4)));   // NaNs: unequal to everything, itself included
  copy_kernel<<<4096, 256>>>(src, dst, nvec); LAUNCH_OK("copy_kernel"); HIP_OK(hipDeviceSynchronize());
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) { copy_kernel<<<4096, 256>>>(src, dst, nvec); LAUNCH_OK("copy_kernel"); }
  HIP_OK(hipDeviceSynchronize());
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double tbps = 2.0 * nvec * sizeof(float4) * 20 / secs / 1e12;
  // dst must equal src: a copy that wrote nothing, or wrote garbage, reports no bandwidth.
  unsigned long long* bad; unsigned long long copy_mismatches = 0;
  HIP_OK(hipMalloc(&bad, sizeof(*bad))); HIP_OK(hipMemset(bad, 0, sizeof(*bad)));
  count_mismatches<<<4096, 256>>>(src, dst, nvec, bad); LAUNCH_OK("count_mismatches");
  HIP_OK(hipMemcpy(&copy_mismatches, bad, sizeof(*bad), hipMemcpyDeviceToHost));
  HIP_OK(hipFree(bad)); HIP_OK(hipFree(src)); HIP_OK(hipFree(dst));
  bool ok = f32.ok && f16.ok && b16.ok && copy_mismatches == 0;
  std::printf("{\"status\": \"%s\", \"device\": \"%s\", \"gfx\": \"%s\", \"n\": %d, "
              "\"fp32\": {\"tflops\": %.2f, \"max_rel_err\": %.3g}, \"fp16\": {\"tflops\": %.2f, \"max_rel_err\": %.3g}, "
              "\"bf16\": {\"tflops\": %.2f, \"max_rel_err\": %.3g}, \"copy_tbps\": %.3f, "
              "\"copy_mismatches\": %llu, \"copy_elements\": %zu}\n",
              ok ? "ok" : "wrong-result", prop.name, prop.gcnArchName, n, f32.tflops, f32.max_rel_err,
              f16.tflops, f16.max_rel_err, b16.tflops, b16.max_rel_err, tbps, copy_mismatches, nvec);
  rocblas_destroy_handle(h);
  return ok ? 0 : 1;
}
