// host_merge.h: the merge and split without an ATen op per request give the same bytes as
// MergeInputs and SplitOutputs + ToHostOutputs, and leave every other batch to them (false, nothing
// changed).
#include "server/serving/kinds/multihead/merge/host_merge.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

#include "batch_test_util.h"
#include "mha/tensor_adapter.h"

namespace mha::serve {
namespace host_merge_test {

using testing::MakeGenerator;
using testing::MakeRequest;
using testing::MaskKind;
using testing::RequestSpec;
using testing::ToHostInputs;

constexpr int64_t kEmbed = 16;

MhaOptions Options() {
  MhaOptions o;
  o.embed_dim = kEmbed;
  o.num_heads = 4;
  return o;
}

std::vector<const HostInputs*> Pointers(const std::vector<HostInputs>& host) {
  std::vector<const HostInputs*> out;
  for (const HostInputs& h : host) out.push_back(&h);
  return out;
}

TEST(HostMerge, PlainQueriesOfOneTMergeAsMergeInputsDoes) {
  auto gen = MakeGenerator(7);
  std::vector<ForwardInputs> requests;
  for (int64_t b : {1, 3, 2}) requests.push_back(MakeRequest(Options(), {b, 5}, gen));
  for (ForwardInputs& r : requests) r.is_causal = true;
  std::vector<HostInputs> host;
  for (const ForwardInputs& r : requests) host.push_back(ToHostInputs(r));
  MergedBatch fast;
  ASSERT_TRUE(MergeHostQueries(Pointers(host), &fast));
  std::vector<const ForwardInputs*> pointers;
  for (const ForwardInputs& r : requests) pointers.push_back(&r);
  BatchModelInfo info;
  info.num_heads = 4;
  info.embed_dim = kEmbed;
  const MergedBatch general = MergeInputs(pointers, info);
  EXPECT_TRUE(at::equal(fast.inputs.query, general.inputs.query));
  EXPECT_EQ(fast.inputs.is_causal, general.inputs.is_causal);
  EXPECT_FALSE(fast.inputs.key_padding_mask.defined());
  EXPECT_FALSE(general.inputs.key_padding_mask.defined());
  EXPECT_EQ(fast.row_offsets, general.row_offsets);
  ASSERT_EQ(fast.parts.size(), general.parts.size());
  for (size_t i = 0; i < fast.parts.size(); ++i) {
    EXPECT_EQ(fast.parts[i].rows, general.parts[i].rows);
    EXPECT_EQ(fast.parts[i].t, general.parts[i].t);
    EXPECT_EQ(fast.parts[i].s, general.parts[i].s);
  }
  EXPECT_EQ(fast.t_max, general.t_max);
  EXPECT_EQ(fast.s_max, general.s_max);
}

TEST(HostMerge, EveryOtherBatchIsLeftToMergeInputs) {
  auto gen = MakeGenerator(8);
  const ForwardInputs plain = MakeRequest(Options(), {1, 4}, gen);
  std::vector<ForwardInputs> others = {
      MakeRequest(Options(), {1, 3}, gen),                      // another T: padded keys
      MakeRequest(Options(), {1, 4, 0, MaskKind::kBool}, gen),  // a key padding mask
      MakeRequest(Options(), {1, 4, 0, MaskKind::kNone, MaskKind::kFloat}, gen),  // attn_mask
      MakeRequest(Options(), {1, 4, 6}, gen),                                     // cross-attention
  };
  RequestSpec weights{1, 4};
  weights.need_weights = true;
  others.push_back(MakeRequest(Options(), weights, gen));
  ForwardInputs causal = plain;
  causal.is_causal = true;
  others.push_back(causal);
  ForwardInputs half = plain;
  half.query = half.query.to(at::kHalf);
  others.push_back(half);
  for (size_t i = 0; i < others.size(); ++i) {
    const std::vector<HostInputs> host = {ToHostInputs(plain), ToHostInputs(others[i])};
    MergedBatch batch;
    batch.t_max = -1;
    EXPECT_FALSE(MergeHostQueries(Pointers(host), &batch)) << i;
    EXPECT_EQ(batch.t_max, -1) << i << ": changed";
  }
  const std::vector<HostInputs> none;
  MergedBatch batch;
  EXPECT_FALSE(MergeHostQueries(Pointers(none), &batch));
}

// A merged output [4, 6, E] of requests of 1 row x T 6, 2 rows x T 4 (padded), 1 row x T 6.
MergedBatch ThreeParts() {
  MergedBatch batch;
  batch.parts = {{1, 6, 6}, {2, 4, 4}, {1, 6, 6}};
  batch.row_offsets = {0, 1, 3};
  batch.t_max = batch.s_max = 6;
  return batch;
}

TEST(HostMerge, OutputsSplitAsSplitOutputsAndToHostOutputsDo) {
  const MergedBatch batch = ThreeParts();
  ForwardOutputs merged;
  merged.output = at::randn({4, 6, kEmbed});
  const OutputTypes float32(ElementType::kFloat32);
  const std::vector<const OutputTypes*> types(3, &float32);
  std::vector<HostOutputs> fast;
  ASSERT_TRUE(SplitHostOutputs(batch, merged, types, &fast));
  const std::vector<ForwardOutputs> general = SplitOutputs(batch, merged, BatchModelInfo{});
  ASSERT_EQ(fast.size(), general.size());
  for (size_t i = 0; i < fast.size(); ++i) {
    const HostOutputs expected = ToHostOutputs(general[i], float32);
    EXPECT_EQ(fast[i].output.shape(), expected.output.shape()) << i;
    EXPECT_TRUE(at::equal(ToTensor(fast[i].output), ToTensor(expected.output))) << i;
    EXPECT_NE(fast[i].output.data(), static_cast<const char*>(merged.output.data_ptr()))
        << "a buffer of its own";
    EXPECT_FALSE(fast[i].attn_weights.defined());
  }
}

TEST(HostMerge, EveryOtherOutputIsLeftToSplitOutputs) {
  const MergedBatch batch = ThreeParts();
  const OutputTypes float32(ElementType::kFloat32), float16(ElementType::kFloat16);
  ForwardOutputs plain;
  plain.output = at::randn({4, 6, kEmbed});
  ForwardOutputs weights = plain;
  weights.attn_weights = at::rand({4, 6, 6});
  ForwardOutputs strided = plain;
  strided.output = at::randn({6, 4, kEmbed}).transpose(0, 1);
  OutputTypes placed(ElementType::kFloat32);
  static float region[4];
  placed.output_place.data = region;
  placed.output_place.device = 0;
  struct Case {
    const ForwardOutputs* merged;
    const OutputTypes* last;
  };
  const Case cases[] = {
      {&weights, &float32}, {&strided, &float32}, {&plain, &float16}, {&plain, &placed}};
  for (size_t i = 0; i < std::size(cases); ++i) {
    const std::vector<const OutputTypes*> types = {&float32, &float32, cases[i].last};
    std::vector<HostOutputs> outs(1);
    EXPECT_FALSE(SplitHostOutputs(batch, *cases[i].merged, types, &outs)) << i;
    EXPECT_EQ(outs.size(), 1u) << i << ": changed";
  }
  std::vector<HostOutputs> outs;
  EXPECT_FALSE(SplitHostOutputs(batch, plain, {&float32}, &outs)) << "one type per request";
  const std::vector<const OutputTypes*> types(3, &float32);
  ForwardOutputs short_rows;  // a pass that lost a row: its split must not read past it
  short_rows.output = at::randn({3, 6, kEmbed});
  EXPECT_FALSE(SplitHostOutputs(batch, short_rows, types, &outs));
  ForwardOutputs short_t;
  short_t.output = at::randn({4, 5, kEmbed});
  EXPECT_FALSE(SplitHostOutputs(batch, short_t, types, &outs));
  EXPECT_TRUE(outs.empty());
}

}  // namespace host_merge_test
}  // namespace mha::serve
