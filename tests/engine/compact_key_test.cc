// Unit tests of CompactKey (node/engine/compact_key.h): inline and heap keys, marks.
#include "node/engine/compact_key.h"

#include <string>
#include <utility>

#include <doctest/doctest.h>

namespace tally {
namespace {

// Keys up to the inline capacity and beyond it read back byte for byte.
TEST_CASE("compact key holds inline and heap keys") {
  for (size_t size : {1, 22, 23, 24, 256}) {
    CAPTURE(size);
    const std::string bytes(size, '\xAB');
    CompactKey key(bytes);
    CHECK(key.view() == bytes);
    CHECK_FALSE(key.empty());
    key.Clear();
    CHECK(key.empty());
  }
}

// Marks are independent of each other and of the key: Assign and Clear keep
// them, a move carries them and leaves the source without any.
TEST_CASE("compact key marks stay apart from the key") {
  for (const std::string& bytes : {std::string("k"), std::string(23, 'y'), std::string(100, 'x')}) {
    CAPTURE(bytes.size());
    CompactKey key(bytes);
    for (int mark = 0; mark < CompactKey::kMarkCount; ++mark) {  // each on its own, key intact
      key.set_marked(mark, true);
      for (int other = 0; other < CompactKey::kMarkCount; ++other) {
        CHECK(key.marked(other) == (other == mark));
      }
      CHECK(key.view() == bytes);
      key.set_marked(mark, false);
    }
    CHECK_FALSE(key.marked(0));
    key.set_marked(1, true);
    CHECK(key.marked(1));
    CHECK_FALSE(key.marked(0));
    CHECK(key.view() == bytes);
    key.Assign("other");
    CHECK(key.view() == "other");
    CHECK(key.marked(1));
    key.set_marked(0, true);
    key.set_marked(1, false);
    CHECK(key.marked(0));
    CHECK_FALSE(key.marked(1));
    CompactKey moved(std::move(key));
    CHECK(moved.marked(0));
    CHECK(moved.view() == "other");
    CHECK_FALSE(key.marked(0));  // NOLINT(bugprone-use-after-move): moved-from is defined
    CHECK(key.empty());
  }
}

}  // namespace
}  // namespace tally
