#include "server/frontends/common/borrowed_bytes.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/support/slice.h>

#include <string>

namespace mha::serve {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedOutputStream;

void AppendVarint(uint64_t value, std::string* out) {
  uint8_t buf[10];
  const uint8_t* end = CodedOutputStream::WriteVarint64ToArray(value, buf);
  out->append(reinterpret_cast<const char*>(buf), static_cast<size_t>(end - buf));
}

// The tag and length prefixes of `path` down to a bytes field of `size` bytes: each level's length
// covers the prefixes below it and the bytes.
std::string Prefix(const std::vector<int>& path, uint64_t size) {
  std::vector<std::string> levels(path.size());
  uint64_t inner = size;
  for (size_t i = path.size(); i-- > 0;) {
    std::string& level = levels[i];
    AppendVarint(WireFormatLite::MakeTag(path[i], WireFormatLite::WIRETYPE_LENGTH_DELIMITED),
                 &level);
    AppendVarint(inner, &level);
    inner += level.size();
  }
  std::string prefix;
  for (const std::string& level : levels) prefix += level;
  return prefix;
}

void ReleaseTensor(void* tensor) { delete static_cast<HostTensor*>(tensor); }

}  // namespace

Status SerializeWithBorrowedBytes(const google::protobuf::MessageLite& head,
                                  std::vector<BorrowedField> fields, grpc::ByteBuffer* out) {
  std::string bytes;
  if (!head.SerializeToString(&bytes)) return Internal("encoding the response failed");
  std::vector<grpc::Slice> slices;
  for (BorrowedField& f : fields) {
    const auto size = static_cast<uint64_t>(f.bytes.bytes());
    bytes += Prefix(f.path, size);
    if (size == 0) continue;
    if (!f.bytes.owner()) {  // nothing keeps the bytes alive past this call: copy them
      bytes.append(f.bytes.data(), size);
      continue;
    }
    slices.emplace_back(bytes);  // what came before, copied once (small)
    bytes.clear();
    auto* owner = new HostTensor(std::move(f.bytes));
    slices.emplace_back(const_cast<char*>(owner->data()), size, &ReleaseTensor, owner);
  }
  if (!bytes.empty() || slices.empty()) slices.emplace_back(bytes);
  grpc::ByteBuffer buffer(slices.data(), slices.size());
  out->Swap(&buffer);
  return Status::Ok();
}

}  // namespace mha::serve
