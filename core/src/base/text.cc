#include "mha/text.h"

namespace mha {

std::string Abbreviate(std::string_view text, size_t limit) {
  if (text.size() <= limit) return std::string(text);
  size_t cut = limit;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return std::string(text.substr(0, cut)) + "\u2026(" + std::to_string(text.size()) + " bytes)";
}

std::string Quoted(std::string_view text) { return "'" + Abbreviate(text) + "'"; }

}  // namespace mha
