// The raw readers and writers: safetensors (every dtype, hostile headers) and torch.save archives
// built here with PyTorchStreamWriter (protocol-4 pickle, views, wrappers, truncation).
#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "mha/loader.h"
#include "test_util.h"

namespace mha {
namespace weights_io_test {

namespace fs = std::filesystem;

using testing::Contains;
using testing::TempDir;

TEST(Safetensors, RoundTripsEveryDType) {
  TempDir dir;
  TensorMap tensors;
  for (at::ScalarType type : {at::kFloat, at::kHalf, at::kBFloat16, at::kDouble, at::kLong,
                              at::kInt, at::kShort, at::kChar, at::kByte}) {
    tensors[c10::toString(type)] = (at::randn({3, 4}) * 50).to(type);
  }
  tensors["bool"] = at::rand({2, 3, 2}) > 0.5;
  tensors["transposed"] = at::randn({4, 3}).t();  // non-contiguous input
  tensors["scalar"] = at::scalar_tensor(1.5);
  tensors["empty"] = at::zeros({0, 4});
  const std::string path = dir.File("all.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  auto read = ReadSafetensors(path);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ASSERT_EQ(read->size(), tensors.size());
  for (const auto& [name, tensor] : tensors) {
    SCOPED_TRACE(name);
    const at::Tensor& got = read->at(name);
    EXPECT_EQ(got.scalar_type(), tensor.scalar_type());
    EXPECT_TRUE(got.is_contiguous());
    EXPECT_TRUE(at::equal(got, tensor));
  }
}

TEST(Safetensors, RejectsHostileHeaders) {
  TempDir dir;
  auto write = [&](const std::string& name, const std::string& header, size_t data_bytes) {
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(uint64_t{header.size()} >> (8 * i));
    bytes += header + std::string(data_bytes, '\0');
    std::ofstream(dir.File(name), std::ios::binary) << bytes;
    return dir.File(name);
  };
  const std::pair<std::string, std::string> cases[] = {
      {R"({"w":{"dtype":"F99","shape":[1],"data_offsets":[0,4]}})", "unsupported dtype"},
      {R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "non-negative"},
      {R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,4]}})",
       "overflows"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "needs 8"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", "out of range"},
      {R"({"w":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", "not 0 or 1"},
      {R"({"w":[1,2]})", "not an object"},
  };
  int i = 0;
  for (const auto& [header, message] : cases) {
    SCOPED_TRACE(header);
    std::string path = write("h" + std::to_string(i++) + ".safetensors", header, 4);
    if (message == "not 0 or 1") {  // valid geometry, invalid bytes
      std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(static_cast<std::streamoff>(8 + header.size()));
      f.put(7);
    }
    auto read = ReadSafetensors(path);
    ASSERT_FALSE(read.ok());
    EXPECT_EQ(read.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(read.status().message(), path));
    EXPECT_TRUE(Contains(read.status().message(), message));
    if (header.find("\"w\"") != std::string::npos) {
      EXPECT_TRUE(Contains(read.status().message(), "'w'"));
    }
  }
}

// torch.save({"model": {"w": arange(12.).reshape(3, 4).t(), "h": tensor([1.5, -2.], float16)},
//             "args": argparse.Namespace(lr=0.5), "step": 7}, path, pickle_protocol=4)'s data.pkl:
// FRAME, SHORT_BINUNICODE, MEMOIZE, STACK_GLOBAL, NEWOBJ, BUILD, a transposed view.
constexpr char kProtocol4Pickle[] =
    "8004951c010000000000007d94288c056d6f64656c947d94288c0177948c0c746f7263682e5f7574696c73948c"
    "125f72656275696c645f74656e736f725f763294939428288c0773746f72616765948c05746f726368948c0c46"
    "6c6f617453746f726167659493948c0130948c03637075944b0c7494514b004b044b0386944b014b048694898c"
    "0b636f6c6c656374696f6e73948c0b4f72646572656444696374949394295294749452948c0168946806282868"
    "0768088c0b48616c6653746f726167659493948c013194680c4b027494514b004b0285944b0185948968122952"
    "9474945294758c0461726773948c086172677061727365948c094e616d6573706163659493942981947d948c02"
    "6c7294473fe000000000000073628c0473746570944b07752e";

std::string FromHex(const char* hex) {
  std::string out;
  for (const char* p = hex; p[0] && p[1]; p += 2) {
    out.push_back(static_cast<char>(std::stoi(std::string(p, 2), nullptr, 16)));
  }
  return out;
}

// Writes a torch.save-style archive with the given data.pkl and the two storages above.
void WriteArchive(const std::string& path, const std::string& pickle, int64_t float_count = 12) {
  caffe2::serialize::PyTorchStreamWriter writer(path);
  writer.writeRecord("data.pkl", pickle.data(), pickle.size());
  const at::Tensor floats = at::arange(float_count, at::kFloat);
  writer.writeRecord("data/0", floats.data_ptr(), floats.numel() * 4);
  const at::Tensor halfs = at::tensor({1.5, -2.0}).to(at::kHalf);
  writer.writeRecord("data/1", halfs.data_ptr(), 4);
  writer.writeEndOfFile();
}

TEST(TorchSaveFormat, ReadsProtocol4WrappedCheckpoints) {
  TempDir dir;
  const std::string path = dir.File("p4.pt");
  WriteArchive(path, FromHex(kProtocol4Pickle));
  auto format = DetectWeightsFormat(path);
  ASSERT_TRUE(format.ok()) << format.status().ToString();
  EXPECT_EQ(format.value(), WeightsFormat::kTorchSave);
  auto tensors = ReadTorchSave(path);
  ASSERT_TRUE(tensors.ok()) << tensors.status().ToString();
  ASSERT_EQ(tensors->size(), 2u);  // "model" unwrapped; "args" and "step" skipped
  const at::Tensor& w = tensors->at("w");
  EXPECT_TRUE(w.is_contiguous());
  EXPECT_TRUE(at::equal(w, at::arange(12, at::kFloat).reshape({3, 4}).t()));
  const at::Tensor& h = tensors->at("h");
  EXPECT_EQ(h.scalar_type(), at::kHalf);
  EXPECT_TRUE(at::equal(h.to(at::kFloat), at::tensor({1.5f, -2.0f})));
}

TEST(TorchSaveFormat, BrokenPicklesAndStoragesAreErrors) {
  TempDir dir;
  const std::string pickle = FromHex(kProtocol4Pickle);
  for (size_t cut = 0; cut < pickle.size(); cut += 7) {
    SCOPED_TRACE("pickle cut at " + std::to_string(cut));
    const std::string path = dir.File("cut" + std::to_string(cut) + ".pt");
    WriteArchive(path, pickle.substr(0, cut));
    auto tensors = ReadTorchSave(path);
    ASSERT_FALSE(tensors.ok());
    EXPECT_EQ(tensors.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(tensors.status().message(), path + ": "));
  }
  std::string bad_opcode = pickle;
  bad_opcode[11] = '\xff';  // where EMPTY_DICT was
  WriteArchive(dir.File("op.pt"), bad_opcode);
  auto tensors = ReadTorchSave(dir.File("op.pt"));
  ASSERT_FALSE(tensors.ok());
  EXPECT_TRUE(Contains(tensors.status().message(), "unsupported pickle opcode 0xff"));

  WriteArchive(dir.File("short.pt"), pickle, /*float_count=*/11);  // storage 0 lacks a float
  tensors = ReadTorchSave(dir.File("short.pt"));
  ASSERT_FALSE(tensors.ok());
  EXPECT_TRUE(Contains(tensors.status().message(), "data/0"));
}

}  // namespace weights_io_test
}  // namespace mha
