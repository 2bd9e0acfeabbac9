// Small string helpers shared by the whole library.
#pragma once

#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace braid {

// Concatenates anything an ostream can print.
template <typename... Args>
std::string strCat(Args&&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

std::vector<std::string> splitString(std::string_view text, char separator);
std::string trim(std::string_view text);
std::string toUpper(std::string_view text);

}  // namespace braid
