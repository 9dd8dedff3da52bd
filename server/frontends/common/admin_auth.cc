#include "server/frontends/common/admin_auth.h"

#include <fstream>

namespace mha::serve {
namespace {

constexpr char kBearer[] = "Bearer ";

// Compares in time independent of where the strings differ.
bool SameToken(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

std::string Trim(const std::string& s) {
  const size_t first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
}

}  // namespace

Status AuthorizeAdmin(std::optional<std::string_view> authorization, const std::string& token) {
  if (token.empty()) return Status::Ok();
  if (!authorization) {
    return Unauthenticated(
        "model control needs 'authorization: Bearer <token>' metadata (--admin-token-file is "
        "set)");
  }
  const std::string value(*authorization);
  if (value.rfind(kBearer, 0) != 0) {
    return Unauthenticated("authorization metadata must be 'Bearer <token>'");
  }
  if (!SameToken(value.substr(sizeof(kBearer) - 1), token)) {
    return PermissionDenied("the admin token does not match --admin-token-file");
  }
  return Status::Ok();
}

StatusOr<std::string> ReadAdminToken(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("--admin-token-file " + path + ": cannot open");
  std::string line;
  std::getline(in, line);
  line = Trim(line);
  if (line.empty()) return InvalidArgument("--admin-token-file " + path + ": the token is empty");
  return line;
}

}  // namespace mha::serve
