// Client-supplied strings echoed in messages and logs are cut, so that a 100 KB model name can
// neither bloat an error (a default client then fails on the metadata size) nor the log.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace mha {

inline constexpr size_t kEchoLimit = 128;

// `text` when it has at most `limit` bytes, else its first `limit` bytes (never cutting a UTF-8
// character) + "…(N bytes)".
std::string Abbreviate(std::string_view text, size_t limit = kEchoLimit);

// Abbreviate(text) between single quotes: how a message names what the client sent.
std::string Quoted(std::string_view text);

}  // namespace mha
