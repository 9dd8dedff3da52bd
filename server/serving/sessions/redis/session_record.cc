#include "server/serving/sessions/redis/session_record.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "mha/text.h"

namespace mha::serve {
namespace {

constexpr char kHeader[] = "mha-session-record 1";

// '%' and line breaks escaped: a value stays on its line.
std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '%') {
      out += "%25";
    } else if (c == '\n') {
      out += "%0A";
    } else if (c == '\r') {
      out += "%0D";
    } else {
      out += c;
    }
  }
  return out;
}

bool Unescape(const std::string& s, std::string* out) {
  out->clear();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      *out += s[i];
      continue;
    }
    const std::string code = s.substr(i + 1, 2);
    if (code == "25") {
      *out += '%';
    } else if (code == "0A") {
      *out += '\n';
    } else if (code == "0D") {
      *out += '\r';
    } else {
      return false;
    }
    i += 2;
  }
  return true;
}

bool ParseCount(const std::string& s, int64_t high, int64_t* out) {
  if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  *out = std::strtoll(s.c_str(), nullptr, 10);
  return *out <= high;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Bytes per element of a stored dtype; 0 for a name it does not know.
int64_t DtypeBytes(const std::string& dtype) {
  if (dtype == "float32") return 4;
  if (dtype == "float16" || dtype == "bfloat16") return 2;
  if (dtype == "int8" || dtype == "fp8_e4m3") return 1;
  return 0;
}

// The parser's state: each scalar field exactly once, the layers in order.
class Parser {
 public:
  Parser(const std::string& id, SessionRecord* r) : id_(id), r_(r) {}

  Status Line(const std::string& line) {
    const size_t space = line.find(' ');
    const std::string name = line.substr(0, space);
    const std::string value = space == std::string::npos ? "" : line.substr(space + 1);
    if (name == "layer") return Layer(value);
    auto it = Fields().find(name);
    if (it == Fields().end()) return Bad("unknown field '" + Abbreviate(name) + "'");
    if (!seen_.insert(name).second) return Bad("field '" + name + "' repeated");
    return it->second(this, value) ? Status::Ok() : Bad("field '" + name + "' is malformed");
  }
  Status Finish() const {
    if (seen_.size() != Fields().size()) {
      for (const auto& [name, parse] : Fields()) {
        if (seen_.count(name) == 0) return Bad("field '" + name + "' missing");
      }
    }
    if (static_cast<int64_t>(r_->layers.size()) != layers_) {
      return Bad(std::to_string(r_->layers.size()) + " layer lines for layers " +
                 std::to_string(layers_));
    }
    return Status::Ok();
  }
  Status Bad(const std::string& what) const {
    return DataLoss("session '" + Abbreviate(id_) + "': its stored record is malformed: " + what);
  }

 private:
  using Field = std::function<bool(Parser*, const std::string&)>;
  static Field Text(std::string SessionRecord::*member) {
    return [member](Parser* p, const std::string& v) {
      return !v.empty() && Unescape(v, &(p->r_->*member));
    };
  }
  static Field Count(int64_t SessionRecord::*member, int64_t low, int64_t high) {
    return [member, low, high](Parser* p, const std::string& v) {
      return ParseCount(v, high, &(p->r_->*member)) && p->r_->*member >= low;
    };
  }
  static Field Flag(bool SessionRecord::*member) {
    return [member](Parser* p, const std::string& v) {
      p->r_->*member = v == "1";
      return v == "0" || v == "1";
    };
  }
  static const std::map<std::string, Field>& Fields() {
    constexpr int64_t kBig = int64_t{1} << 40;
    static const std::map<std::string, Field> fields = {
        {"session", Text(&SessionRecord::session_id)},
        {"model", Text(&SessionRecord::model)},
        {"version", Text(&SessionRecord::version)},
        {"fingerprint", Text(&SessionRecord::fingerprint)},
        {"kind", Text(&SessionRecord::kind)},
        {"dtype", Text(&SessionRecord::dtype)},
        {"rows", Count(&SessionRecord::rows, 1, kBig)},
        {"heads", Count(&SessionRecord::heads, 1, kBig)},
        {"head_dim", Count(&SessionRecord::head_dim, 1, kBig)},
        {"dtype_bytes", Count(&SessionRecord::dtype_bytes, 1, 8)},
        {"block_tokens", Count(&SessionRecord::block_tokens, 1, kBig)},
        {"max_tokens", Count(&SessionRecord::max_tokens, 0, kBig)},
        {"cross", Flag(&SessionRecord::cross)},
        {"tokens", Count(&SessionRecord::tokens, 0, kBig)},
        {"released", Flag(&SessionRecord::released)},
        {"layers", [](Parser* p, const std::string& v) {
           return ParseCount(v, 1 << 16, &p->layers_) && p->layers_ >= 1;
         }}};
    return fields;
  }
  // "layer <tokens> <key>...": the block count checked once block_tokens is known (Check).
  Status Layer(const std::string& value) {
    std::istringstream in(value);
    std::string tokens, key;
    SessionRecordLayer layer;
    in >> tokens;
    if (!ParseCount(tokens, int64_t{1} << 40, &layer.tokens)) {
      return Bad("layer " + std::to_string(r_->layers.size()) + ": token count malformed");
    }
    while (in >> key) layer.blocks.push_back(key);
    r_->layers.push_back(std::move(layer));
    return Status::Ok();
  }

  const std::string& id_;
  SessionRecord* r_;
  std::set<std::string> seen_;
  int64_t layers_ = 0;
};

// The record against itself: block counts, and the session it names.
Status CheckShape(const std::string& id, const SessionRecord& r, const Parser& parser) {
  if (r.session_id != id) {
    return parser.Bad("it names session '" + Abbreviate(r.session_id) + "'");
  }
  const int64_t size = DtypeBytes(r.dtype);
  if (size == 0) return parser.Bad("dtype '" + Abbreviate(r.dtype) + "' is unknown");
  if (size != r.dtype_bytes) {
    return parser.Bad("dtype_bytes " + std::to_string(r.dtype_bytes) + " does not match dtype '" +
                      r.dtype + "' (" + std::to_string(size) + ")");
  }
  for (size_t l = 0; l < r.layers.size(); ++l) {
    const auto& layer = r.layers[l];
    const int64_t want = CeilDiv(layer.tokens, r.block_tokens);
    if (static_cast<int64_t>(layer.blocks.size()) != want) {
      return parser.Bad("layer " + std::to_string(l) + " holds " + std::to_string(layer.tokens) +
                        " tokens in " + std::to_string(layer.blocks.size()) + " blocks, " +
                        std::to_string(want) + " expected (" + std::to_string(r.block_tokens) +
                        " tokens per block)");
    }
  }
  return Status::Ok();
}

// The record against what this replica serves.
Status CheckExpected(const std::string& id, const SessionRecord& r, const SessionRecordExpect& e) {
  const std::string who = "session '" + Abbreviate(id) + "': its stored record is ";
  auto differs = [&](const std::string& what, const std::string& stored, const std::string& here) {
    return DataLoss(who + "of " + what + " '" + Abbreviate(stored) + "', this replica serves '" +
                    Abbreviate(here) + "'");
  };
  if (r.model != e.model) return differs("model", r.model, e.model);
  if (r.fingerprint != e.fingerprint) {
    return differs("another model version (fingerprint)", r.fingerprint, e.fingerprint);
  }
  if (r.kind != e.kind) return differs("kind", r.kind, e.kind);
  if (r.dtype != e.dtype) return differs("dtype", r.dtype, e.dtype);
  if (r.heads != e.heads || r.head_dim != e.head_dim ||
      static_cast<int64_t>(r.layers.size()) != e.layers) {
    return DataLoss(who + "of " + std::to_string(r.layers.size()) + " layers x " +
                    std::to_string(r.heads) + " heads x " + std::to_string(r.head_dim) +
                    ", this replica's model has " + std::to_string(e.layers) + " x " +
                    std::to_string(e.heads) + " x " + std::to_string(e.head_dim));
  }
  return Status::Ok();
}

}  // namespace

int64_t SessionRecord::BlockBytes(size_t l, size_t j) const {
  const int64_t begin = static_cast<int64_t>(j) * block_tokens;
  const int64_t n = std::min(block_tokens, layers.at(l).tokens - begin);
  return rows * n * bytes_per_token();
}

int64_t SessionRecord::durable_tokens() const {
  int64_t least = layers.empty() ? 0 : layers.front().tokens;
  for (const auto& layer : layers) least = std::min(least, layer.tokens);
  return least;
}

std::string EncodeSessionRecord(const SessionRecord& r) {
  std::ostringstream out;
  out << kHeader << "\nsession " << Escape(r.session_id) << "\nmodel " << Escape(r.model)
      << "\nversion " << Escape(r.version) << "\nfingerprint " << Escape(r.fingerprint) << "\nkind "
      << Escape(r.kind) << "\ndtype " << Escape(r.dtype) << "\nrows " << r.rows << "\nheads "
      << r.heads << "\nhead_dim " << r.head_dim << "\ndtype_bytes " << r.dtype_bytes
      << "\nblock_tokens " << r.block_tokens << "\nmax_tokens " << r.max_tokens << "\ncross "
      << (r.cross ? 1 : 0) << "\ntokens " << r.tokens << "\nreleased " << (r.released ? 1 : 0)
      << "\nlayers " << r.layers.size() << "\n";
  for (const auto& layer : r.layers) {
    out << "layer " << layer.tokens;
    for (const auto& key : layer.blocks) out << " " << key;
    out << "\n";
  }
  return out.str();
}

StatusOr<SessionRecord> DecodeSessionRecord(const std::string& id, const std::string& text,
                                            const SessionRecordExpect& expect) {
  auto r = DecodeSessionRecord(id, text);
  if (!r.ok()) return r.status();
  MHA_RETURN_IF_ERROR(CheckExpected(id, *r, expect));
  return r;
}

std::vector<std::string> SessionRecordBlocks(const SessionRecord& record) {
  std::vector<std::string> named;
  std::set<std::string> seen;
  for (const auto& layer : record.layers) {
    for (const auto& key : layer.blocks) {
      if (seen.insert(key).second) named.push_back(key);
    }
  }
  return named;
}

StatusOr<SessionRecord> DecodeSessionRecord(const std::string& id, const std::string& text) {
  SessionRecord r;
  Parser parser(id, &r);
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != kHeader) {
    return parser.Bad("it does not start with '" + std::string(kHeader) + "'");
  }
  while (std::getline(in, line)) MHA_RETURN_IF_ERROR(parser.Line(line));
  MHA_RETURN_IF_ERROR(parser.Finish());
  MHA_RETURN_IF_ERROR(CheckShape(id, r, parser));
  return r;
}

}  // namespace mha::serve
