// How a KV block pool (mha/kv_cache.h) stores the keys and values of a token: the model's compute
// dtype (today's cache), float32, bfloat16, float16, int8, or float8 e4m3 on a CUDA device.
//
// int8 is asymmetric per token and per K/V head, computed when the token is appended (no
// calibration data): a head's D values x become codes q in [-128, 127] with a float scale and zero
// (scale = (max x - min x) / 255, zero = min x + 128 * scale, q = round((x - zero) / scale)), and
// read back as q * scale + zero, within scale / 2 of x per element (plus float rounding). The
// scales ([slots, K/V heads, 2] floats per store) live in the pool beside the codes and move with
// their block. fp8_e4m3 keeps one scale per token and head the same way (symmetric: scale =
// max |x| / 448, zero 0). bf16 and fp16 round each value to nearest, ties to even.
//
// Torch-free: the serving layer parses the names (--kv-cache-dtype, config.json kv_cache_dtype).
#pragma once

#include <cstdint>
#include <string>

#include "mha/options.h"
#include "mha/status.h"

namespace mha {

enum class KvCacheDtype { kModel, kFloat32, kBFloat16, kFloat16, kInt8, kFp8E4m3 };

// "model", "fp32", "bf16", "fp16", "int8", "fp8_e4m3".
const char* KvCacheDtypeName(KvCacheDtype dtype);
// "model, fp32, bf16, fp16, int8, fp8_e4m3": the choices, for error messages and help.
std::string KvCacheDtypeChoices();
// The dtype named `name` (one of the choices above, exactly), or INVALID_ARGUMENT naming `field`,
// the value and the choices: "--kv-cache-dtype: unknown KV cache dtype 'int4' (choices: ...)".
StatusOr<KvCacheDtype> ParseKvCacheDtype(const std::string& name, const std::string& field);
// Whether the cache keeps a scale and a zero per token and K/V head beside the values.
bool KvCacheDtypeScaled(KvCacheDtype dtype);

// kModel as what a model computing in `compute` stores (fp32, fp16, bf16); the others as they are.
KvCacheDtype ResolveKvCacheDtype(KvCacheDtype dtype, DType compute);
// What a pool of `resolved` (a dtype ResolveKvCacheDtype gave) stores per token for `heads` K/V
// heads of `head_dim`: 2 * heads * head_dim * its size, + 2 * heads * 8 bytes of scales when
// scaled (KvBlockPool::bytes_per_token, before a pool exists).
int64_t KvCacheBytesPerToken(KvCacheDtype resolved, int64_t heads, int64_t head_dim);
// OK when a pool of `dtype` can be made on `device` ("cpu", "cuda:0"); else FAILED_PRECONDITION
// saying why (fp8_e4m3 off a CUDA device, or with a LibTorch without float8).
Status CheckKvCacheDtype(KvCacheDtype dtype, const std::string& device);

}  // namespace mha
