// The training text of `make-model bigram` when no --text is given: a short story written for
// HillInfer (no third-party text), repetitive enough that word bigrams make readable sentences.
#pragma once

namespace hill::cli {

inline constexpr const char * demo_text = R"(Once upon a time there was a small robot who lived in a big library.
The robot loved to read books, and every night the robot read one more book.
One day the robot found a very old book with a red cover. The book was about the sea.
The robot had never seen the sea, so the robot asked the old librarian about it.
The librarian smiled and said that the sea was big and blue and full of fish.
The robot wanted to see the sea with its own eyes. So one morning the robot left the library.
The robot walked past the park and past the market and past the old bridge.
On the way the robot met a little girl who was looking for her cat.
The robot helped the little girl, and soon they found the cat under a tree.
The little girl was happy, and she walked with the robot to the sea.
When they saw the sea, the robot was very happy. The sea was big and blue, just like the book said.
The robot and the little girl sat on the sand and watched the waves all day.
In the evening the robot went back to the library and told the librarian about the sea.
The librarian was happy too, and the robot wrote a new book about the day at the sea.
Every night after that, the robot read the new book to the little girl and her cat.
And every night the little girl said that it was the best book in the whole library.)";

}  // namespace hill::cli
