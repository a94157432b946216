// Passkey retrieval at 4K tokens (label model: run in the Release build only, where it takes about
// 10 s on 2 cores; under ASan 100 s); 16K and longer are in test_passkey_slow (label slow: not in CI,
// whose 25 minutes they do not fit beside the rest); passkey_check.h says what is checked.
#include "passkey_check.h"

namespace hill {

TEST(passkey, retrieval_4k) { test::check_retrieval(4096); }

}  // namespace hill
