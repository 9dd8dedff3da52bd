#include "server/frontends/rest/json_body.h"

#include <utility>

#include "core/src/load/json_text.h"
#include "server/frontends/rest/json_nonfinite.h"

namespace mha::serve::rest {
namespace {

using nlohmann::json;

// nlohmann's SAX interface: builds the document's skeleton and moves each value of
// inputs[i].data into data[i] instead of the tree (the tree keeps `"data": []`), as the parser
// callback this replaces did: nested arrays are flattened; an object (at any depth) is one value
// that is not a number, and values directly inside an object are dropped. It takes the number
// tokens that ScanNonFiniteTokens rewrote as NaN / Infinity / -Infinity there and nowhere else.
// Depths count the containers open around an event, as nlohmann's parser callbacks do: top-level
// keys at 1, the `inputs` array's elements at 2, their keys at 3, data values from 4.
class BodyReader {
 public:
  BodyReader(ParsedBody* out, const NonFiniteScan& scan, int64_t max_values)
      : out_(out), scan_(scan), max_values_(max_values) {}

  bool null() { return Value(json(nullptr)); }
  bool boolean(bool v) { return Value(json(v)); }
  bool number_integer(json::number_integer_t v) { return Number(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return Number(json(v)); }
  bool number_float(json::number_float_t v, const std::string& /*text*/) { return Number(json(v)); }
  bool string(std::string& v) { return Value(json(std::move(v))); }
  bool binary(json::binary_t& /*v*/) { return false; }  // never in JSON text
  bool start_object(std::size_t /*n*/) { return Start(json::value_t::object); }
  bool start_array(std::size_t /*n*/) { return Start(json::value_t::array); }
  bool end_object() { return End(); }
  bool end_array() { return End(); }
  bool key(std::string& k);
  bool parse_error(std::size_t /*at*/, const std::string& /*token*/, const json::exception&) {
    return false;
  }

  bool over_budget() const { return over_budget_; }
  bool misplaced_token() const { return misplaced_token_; }

 private:
  bool InData() const { return !data_.empty(); }
  bool Value(json v);
  bool Number(json v);
  bool Start(json::value_t type);
  bool End();
  bool Keep(json v);
  bool Budget();
  void StartData();
  void Add(float f, bool is_bool, bool is_number);

  ParsedBody* const out_;
  const NonFiniteScan& scan_;
  const int64_t max_values_;
  json* slot_ = nullptr;      // the member the last key named
  std::vector<json*> stack_;  // the open containers of the tree
  std::vector<bool> data_;    // in data: the containers open there, the data array first (array?)
  int depth_ = 0;             // containers open
  size_t numbers_ = 0;        // number tokens seen
  int64_t kept_ = 0;          // values in the tree
  bool over_budget_ = false, misplaced_token_ = false;
  std::string top_key_, input_key_;
  bool in_inputs_ = false;
  int64_t element_ = -1;
};

bool BodyReader::Budget() {
  if (++kept_ <= max_values_) return true;
  over_budget_ = true;
  return false;
}

bool BodyReader::Keep(json v) {
  if (!Budget()) return false;
  if (depth_ == 2 && in_inputs_) ++element_, input_key_.clear();
  if (stack_.empty()) {
    out_->document = std::move(v);
  } else if (stack_.back()->is_array()) {
    stack_.back()->push_back(std::move(v));
  } else {
    *slot_ = std::move(v);
  }
  return true;
}

void BodyReader::Add(float f, bool is_bool, bool is_number) {
  TensorData& d = out_->data[element_];
  d.bools += is_bool ? 1 : 0;
  d.non_numbers += is_bool || is_number ? 0 : 1;
  d.floats.append(reinterpret_cast<const char*>(&f), sizeof(f));
  ++d.count;
}

bool BodyReader::Value(json v) {
  if (!InData()) return Keep(std::move(v));
  if (data_.back()) Add(v.is_boolean() && v.get<bool>() ? 1.0f : 0.0f, v.is_boolean(), false);
  return true;
}

bool BodyReader::Number(json v) {
  const NumberKind kind = scan_.Kind(numbers_++);
  if (!InData()) {
    misplaced_token_ = kind != NumberKind::kFinite;
    return !misplaced_token_ && Keep(std::move(v));
  }
  if (data_.back()) {
    Add(kind != NumberKind::kFinite ? NonFiniteValue(kind) : static_cast<float>(v.get<double>()),
        false, true);
  }
  return true;
}

bool BodyReader::key(std::string& k) {
  if (InData()) return true;  // a key of an object within data
  if (!Budget()) return false;
  if (depth_ == 1) top_key_ = k;
  if (depth_ == 3 && in_inputs_) input_key_ = k;
  slot_ = &(*stack_.back())[k];  // a repeated key: the last value wins
  return true;
}

void BodyReader::StartData() {
  if (out_->data.size() <= static_cast<size_t>(element_)) out_->data.resize(element_ + 1);
  TensorData& d = out_->data[element_];
  d.repeated = d.repeated || d.present;
  d.present = true;
  data_.push_back(true);
}

bool BodyReader::Start(json::value_t type) {
  const bool array = type == json::value_t::array;
  if (InData()) {
    if (!array) ++out_->data[element_].non_numbers;
    data_.push_back(array);
    ++depth_;
    return true;
  }
  const bool inputs = depth_ == 1 && top_key_ == "inputs" && array;
  const bool data = depth_ == 3 && in_inputs_ && element_ >= 0 && input_key_ == "data" && array;
  if (!Keep(json(type))) return false;
  stack_.push_back(stack_.empty()              ? &out_->document
                   : stack_.back()->is_array() ? &stack_.back()->back()
                                               : slot_);
  ++depth_;
  if (inputs) in_inputs_ = true, element_ = -1;
  if (data) StartData();
  return true;
}

bool BodyReader::End() {
  --depth_;
  if (data_.size() > 1) {  // an array or object within data
    data_.pop_back();
    return true;
  }
  data_.clear();  // the data array itself ends here, if it is the one ending
  stack_.pop_back();
  if (depth_ == 1 && in_inputs_) in_inputs_ = false;
  return true;
}

}  // namespace

StatusOr<ParsedBody> ParseJsonBody(std::string_view text, const BodyLimits& limits) {
  if (internal::JsonNestingDepth(text, limits.max_depth) > limits.max_depth) {
    return InvalidArgument("request JSON nests objects/arrays deeper than " +
                           std::to_string(limits.max_depth) + " levels (refused before parsing)");
  }
  const NonFiniteScan scan = ScanNonFiniteTokens(text);
  const std::string_view parsed_text = scan.found() ? std::string_view(scan.text) : text;
  ParsedBody out;
  BodyReader reader(&out, scan, limits.max_values);
  const bool ok = json::sax_parse(parsed_text.begin(), parsed_text.end(), &reader);
  if (reader.over_budget()) {
    return InvalidArgument("request JSON has more than " + std::to_string(limits.max_values) +
                           " values outside the inputs' data");
  }
  const std::string invalid =
      "request body is not valid JSON (" + std::to_string(text.size()) + " bytes)";
  if (reader.misplaced_token()) {
    return InvalidArgument(invalid +
                           ": NaN, Infinity and -Infinity are accepted only as values "
                           "of an input's data");
  }
  if (!ok) return InvalidArgument(invalid);
  return out;
}

}  // namespace mha::serve::rest
