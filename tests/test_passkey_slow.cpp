// Passkey retrieval at 16K, 64K and 128K tokens (label slow: a minute to minutes each on 2 cores; not
// in CI);
// passkey_check.h says what is checked.
#include "passkey_check.h"

namespace hill {

TEST(passkey, retrieval_16k) { test::check_retrieval(16384); }
TEST(passkey, retrieval_64k) { test::check_retrieval(65536); }
TEST(passkey, retrieval_128k) { test::check_retrieval(131072); }

}  // namespace hill
