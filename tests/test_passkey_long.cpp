// Passkey retrieval at 4K and 16K tokens (label model: run in the Release build only, where they take
// about 15 s and a minute on 2 cores; under ASan 4K alone takes 100 s); passkey_check.h says what is
// checked.
#include "passkey_check.h"

namespace hill {

TEST(passkey, retrieval_4k) { test::check_retrieval(4096); }
TEST(passkey, retrieval_16k) { test::check_retrieval(16384); }

}  // namespace hill
