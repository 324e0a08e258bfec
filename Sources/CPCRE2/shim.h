// PCRE2's 8-bit library (Debian: libpcre2-dev), for cache-key patterns with bounded cost.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
