// Passkey retrieval at 16K tokens (label model: about a minute on 2 cores); passkey_check.h says
// what is checked.
#include "passkey_check.h"

namespace hill {

TEST(passkey, retrieval_16k) { test::check_retrieval(16384); }

}  // namespace hill
