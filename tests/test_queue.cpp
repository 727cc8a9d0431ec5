#include <gtest/gtest.h>

#include <thread>

#include "pipeline/frame_pool.hpp"
#include "pipeline/queue.hpp"

using namespace vfp;

TEST(BoundedQueue, FifoAndClose) {
  BoundedQueue<int> q(3);
  EXPECT_TRUE(q.push(1));
  EXPECT_TRUE(q.push(2));
  EXPECT_EQ(*q.pop(), 1);
  q.close();
  EXPECT_FALSE(q.push(3));
  EXPECT_EQ(*q.pop(), 2);  // drains after close
  EXPECT_FALSE(q.pop().has_value());
}

TEST(BoundedQueue, PushBlocksWhenFull) {
  BoundedQueue<int> q(2);
  q.push(1);
  q.push(2);
  std::atomic<bool> pushed{false};
  std::thread t([&] {
    q.push(3);
    pushed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(pushed.load());
  EXPECT_EQ(*q.pop(), 1);
  t.join();
  EXPECT_TRUE(pushed.load());
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(q.high_water(), 2u);
}

TEST(BoundedQueue, KeepNewestDropsOldest) {
  BoundedQueue<int> q(2);
  EXPECT_EQ(q.push_keep_newest(1), 0);
  EXPECT_EQ(q.push_keep_newest(2), 0);
  EXPECT_EQ(q.push_keep_newest(3), 1);
  EXPECT_EQ(q.push_keep_newest(4), 1);
  EXPECT_EQ(*q.pop(), 3);
  EXPECT_EQ(*q.pop(), 4);
  q.close();
  EXPECT_EQ(q.push_keep_newest(5), -1);
}

TEST(BoundedQueue, AbortDiscardsAndWakesBlockedPush) {
  BoundedQueue<int> q(1);
  q.push(1);
  std::thread t([&] { EXPECT_FALSE(q.push(2)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  q.abort();
  t.join();
  EXPECT_FALSE(q.pop().has_value());
}

TEST(FramePool, RecyclesFramesAndBlocksWhenEmpty) {
  FramePool pool({PixelFormat::GRAY8, 8, 8, {25, 1}}, 2, false);
  auto a = pool.acquire();
  auto b = pool.acquire();
  EXPECT_EQ(pool.available(), 0);
  HostFrame* raw = a.get();
  std::atomic<bool> got{false};
  std::thread t([&] {
    auto c = pool.acquire();
    EXPECT_EQ(c.get(), raw);  // the same allocation comes back
    got = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_FALSE(got.load());
  a.reset();
  t.join();
  EXPECT_TRUE(got.load());
  EXPECT_EQ(pool.available(), 1);
}
