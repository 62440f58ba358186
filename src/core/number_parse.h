// Strict decimal syntax for numbers a user types (CLI options, budget strings, list items).
// std::strtod and std::strtoull (base 0, as CLI11 2.1 calls them) also accept leading
// whitespace, '+', hex ("0x10" = 16, "0x1p4" = 16.0), octal ("010" = 8), "inf", "nan" and, for
// an unsigned target, "-1" (= 2^64 - 1); every one of those is rejected here, so a typo can
// never become a silent number (issue 13: `--budget 0x10` was 16 tokens, `--seed -1` accepted).
#pragma once

#include <cstdint>
#include <string>

namespace kvevict {

// [-]digits[.[digits]][(e|E)[+|-]digits] or [-].digits[exponent]: at least one mantissa digit.
bool is_decimal_number(const std::string& s);
// [-]digits (allow_negative) or digits.
bool is_decimal_integer(const std::string& s, bool allow_negative = true);

// The value of a decimal number; throws naming `what` and `s` for any other syntax, and for a
// magnitude beyond double's range ("1e400").
double parse_decimal(const std::string& s, const char* what);
// The value of a decimal integer; throws naming `what` and `s` for any other syntax and for
// values outside int64.
int64_t parse_decimal_int(const std::string& s, const char* what);

}  // namespace kvevict
