// SPDX-License-Identifier: MIT
/// \file errors.hpp
/// Checking a bad call: it throws std::invalid_argument whose message holds the numbers and
/// words that name what is wrong (for errors.cpp and multihead_errors.cpp).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ea_test {

/// The message of the std::invalid_argument that `f` throws, or a marker saying what happened.
template <class F>
std::string invalid_argument_message(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<wrong exception type: ") + e.what() + ">";
  } catch (...) {
    return "<non-standard exception>";
  }
  return "<no exception>";
}

/// The integers written in `s` (maximal runs of digits; a sign is not part of them).
inline std::vector<long> integers_in(const std::string& s) {
  std::vector<long> out;
  for (size_t i = 0; i < s.size();) {
    if (std::isdigit(static_cast<unsigned char>(s[i]))) {
      size_t j = i;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      out.push_back(std::stol(s.substr(i, j - i)));
      i = j;
    } else {
      ++i;
    }
  }
  return out;
}

inline std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

/// Groups of words: the message must hold at least one word of each group (case-insensitive).
/// A group of one word is a word the message must hold.
using WordGroups = std::vector<std::vector<std::string>>;

/// A call that must throw; the numbers its message must hold, and the groups of words.
struct BadCall {
  std::string name;
  std::function<void()> call;
  std::vector<long> numbers;
  WordGroups words;
};

/// `bad.call` throws std::invalid_argument whose message holds every number and a word of every
/// group; with `outputs_untouched`, also that it returns true after the call (nothing written).
inline void check_bad_call(const BadCall& bad, const std::function<bool()>& outputs_untouched = nullptr) {
  CAPTURE(bad.name);
  CHECK_THROWS_AS(bad.call(), std::invalid_argument);
  const std::string msg = invalid_argument_message(bad.call);
  CAPTURE(msg);
  const auto ints = integers_in(msg);
  for (const long n : bad.numbers) {
    CAPTURE(n);
    CHECK(std::find(ints.begin(), ints.end(), n) != ints.end());
  }
  for (const auto& group : bad.words) {
    bool found = false;
    std::string alternatives;
    for (const auto& w : group) {
      found = found || lower(msg).find(lower(w)) != std::string::npos;
      alternatives += "'" + w + "' ";
    }
    CAPTURE(alternatives);
    CHECK(found);
  }
  if (outputs_untouched) CHECK_MESSAGE(outputs_untouched(), "an output was written by a call that threw");
}

}  // namespace ea_test
