#include "core/error.h"

#include <cstdio>
#include <cstdlib>

namespace hill {

void assert_failed(const char * expr, const char * file, int line) {
    std::fprintf(stderr, "hillinfer: internal error: assertion `%s` failed at %s:%d\n", expr, file, line);
    std::abort();
}

}  // namespace hill
