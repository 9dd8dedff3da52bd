// What the core's hand-vectorized CPU kernels share (paged_kernel.cc, panel_gemm.cc): one way to
// build a function twice (x86-64-v3 = AVX2 + FMA, and the baseline, picked once at load by an
// ifunc), the x86-64-v4 (AVX-512) target, forced inlining, and the 8-float vector type with its
// unaligned load and store. Private to core/src.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MHA_SIMD_X86_GCC 1
#define MHA_V4 __attribute__((target("arch=x86-64-v4")))
#else
#define MHA_SIMD_X86_GCC 0
#endif

// Sanitizer builds compile the baseline only: target_clones' ifunc resolver runs before the
// sanitizer's runtime is up (it crashed every TSan binary at load).
#if MHA_SIMD_X86_GCC && !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define MHA_CPU_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define MHA_CPU_CLONES
#endif

#define MHA_INLINE inline __attribute__((always_inline))
// The same for a lambda (after its parameters): an outlined lambda is compiled for the baseline
// target, not for the clone that calls it.
#define MHA_LAMBDA_INLINE __attribute__((always_inline))

namespace mha::internal {

// Eight floats; V8u reads and writes them at any float alignment (a head's row within a page).
typedef float V8 __attribute__((vector_size(32)));
typedef float V8u __attribute__((vector_size(32), aligned(4), may_alias));

}  // namespace mha::internal

#define MHA_LD(p) (*reinterpret_cast<const ::mha::internal::V8u*>(p))
#define MHA_ST(p, x) (*reinterpret_cast<::mha::internal::V8u*>(p) = (x))
