// ThreadScratch: one object per thread reused by calls that follow one
// another, a fresh one for a call nested inside another.
#include "util/thread_scratch.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace braid {
namespace {

struct Tag;
using Scratch = ThreadScratch<std::vector<int>, Tag>;

TEST(ThreadScratch, SequentialCallsShareNestedCallsDoNot) {
  const std::vector<int>* first = nullptr;
  {
    Scratch s;
    s->assign(100, 1);
    first = &*s;
    {
      Scratch nested;  // while the outer one is in use
      EXPECT_NE(&*nested, first);
      EXPECT_TRUE(nested->empty());
      nested->push_back(2);
    }
    EXPECT_EQ(s->size(), 100u);  // the nested use did not touch it
  }
  Scratch again;
  EXPECT_EQ(&*again, first);  // the same storage, capacity kept
  EXPECT_GE(again->capacity(), 100u);

  bool sameAsFirst = true, empty = false;
  std::thread([&] {
    Scratch t;
    sameAsFirst = &*t == first;
    empty = t->empty();
  }).join();
  EXPECT_FALSE(sameAsFirst);  // each thread has its own
  EXPECT_TRUE(empty);
}

}  // namespace
}  // namespace braid
