#include "server/frontends/rest/json_body.h"

#include <utility>

#include "core/src/json_text.h"

namespace mha::serve::rest {
namespace {

using nlohmann::json;
using Event = json::parse_event_t;

// nlohmann's parser callback (depth = containers open around the event): keeps the document's
// skeleton, moves each value of inputs[i].data into data[i] and drops it from the tree.
class Collector {
 public:
  Collector(ParsedBody* out, int64_t max_values) : out_(out), max_values_(max_values) {}

  bool operator()(int depth, Event event, json& parsed) {
    if (over_budget_) return false;
    if (in_data_ && depth >= 4) return InData(event, parsed);
    Track(depth, event, parsed);
    if (event != Event::object_end && event != Event::array_end && ++kept_ > max_values_) {
      over_budget_ = true;
      return false;
    }
    return true;
  }

  bool over_budget() const { return over_budget_; }

 private:
  // Follows the position: top-level key, the `inputs` array, its elements, their keys.
  void Track(int depth, Event event, const json& parsed) {
    if (event == Event::key && depth == 1) top_key_ = parsed.get<std::string>();
    if (depth == 1 && top_key_ == "inputs") {
      if (event == Event::array_start) in_inputs_ = true, element_ = -1;
      if (event == Event::array_end) in_inputs_ = false;
    }
    if (!in_inputs_) return;
    const bool starts =
        event == Event::object_start || event == Event::array_start || event == Event::value;
    if (depth == 2 && starts) ++element_, input_key_.clear();
    if (event == Event::key && depth == 3) input_key_ = parsed.get<std::string>();
    if (depth == 3 && input_key_ == "data" && event == Event::array_start) StartData();
    if (depth == 3 && event == Event::array_end) in_data_ = false;
  }

  void StartData() {
    if (element_ < 0) return;
    if (out_->data.size() <= static_cast<size_t>(element_)) out_->data.resize(element_ + 1);
    TensorData& d = out_->data[element_];
    d.repeated = d.repeated || d.present;
    d.present = true;
    in_data_ = true;
  }

  // Inside a data array: values are collected and dropped, nested arrays kept until they end
  // (their values are reported only while they are kept), then dropped.
  bool InData(Event event, const json& parsed) {
    TensorData& d = out_->data[element_];
    switch (event) {
      case Event::array_start:
        return true;
      case Event::value:
        Add(parsed, &d);
        return false;
      case Event::object_start:
        ++d.non_numbers;
        return false;
      default:
        return false;  // array_end (an emptied nested array), object_end, key
    }
  }

  static void Add(const json& v, TensorData* d) {
    float f = 0;
    if (v.is_boolean()) {
      f = v.get<bool>() ? 1.0f : 0.0f;
      ++d->bools;
    } else if (v.is_number()) {
      f = static_cast<float>(v.get<double>());
    } else {
      ++d->non_numbers;
    }
    d->floats.append(reinterpret_cast<const char*>(&f), sizeof(f));
    ++d->count;
  }

  ParsedBody* const out_;
  const int64_t max_values_;
  int64_t kept_ = 0;
  bool over_budget_ = false;
  std::string top_key_, input_key_;
  bool in_inputs_ = false, in_data_ = false;
  int64_t element_ = -1;
};

}  // namespace

StatusOr<ParsedBody> ParseJsonBody(std::string_view text, const BodyLimits& limits) {
  if (internal::JsonNestingDepth(text, limits.max_depth) > limits.max_depth) {
    return InvalidArgument("request JSON nests objects/arrays deeper than " +
                           std::to_string(limits.max_depth) + " levels (refused before parsing)");
  }
  ParsedBody out;
  Collector collector(&out, limits.max_values);
  json::parser_callback_t callback = std::ref(collector);
  out.document = json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/false);
  if (collector.over_budget()) {
    return InvalidArgument("request JSON has more than " + std::to_string(limits.max_values) +
                           " values outside the inputs' data");
  }
  if (out.document.is_discarded()) {
    return InvalidArgument("request body is not valid JSON (" + std::to_string(text.size()) +
                           " bytes)");
  }
  return out;
}

}  // namespace mha::serve::rest
