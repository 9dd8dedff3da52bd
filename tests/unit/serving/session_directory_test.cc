// SessionDirectory (server/serving/sessions/session_directory.h): where each open session lives,
// why an ended one ended (tombstones, the most recent kMaxTombstones), and the session-id rules
// (CheckSessionId, NewSessionId).
#include "server/serving/sessions/session_directory.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "test_util.h"

namespace mha::serve {
namespace session_directory_test {

using testing::Contains;

TEST(SessionDirectoryTest, FindsWhereAnOpenSessionLives) {
  SessionDirectory directory;
  ASSERT_TRUE(directory.Add("a", {"enc", "1"}).ok());
  ASSERT_TRUE(directory.Add("b", {"dec", "3"}).ok());
  auto a = directory.Find("a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->model, "enc");
  EXPECT_EQ(a->version, "1");
  auto b = directory.Find("b");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->model, "dec");
  EXPECT_EQ(b->version, "3");
  EXPECT_EQ(directory.open_count(), 2);
}

TEST(SessionDirectoryTest, AnIdOpenAlreadyIsRefusedAndKeepsItsPlace) {
  SessionDirectory directory;
  ASSERT_TRUE(directory.Add("a", {"enc", "1"}).ok());
  const Status again = directory.Add("a", {"dec", "2"});
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(Contains(again.message(), "session_id: 'a' is open on this server already"));
  auto a = directory.Find("a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->model, "enc") << "the refused Add moved the open session";
  EXPECT_EQ(directory.open_count(), 1);
}

TEST(SessionDirectoryTest, AnEndedSessionIsNotFoundSayingWhy) {
  SessionDirectory directory;
  ASSERT_TRUE(directory.Add("a", {"enc", "1"}).ok());
  directory.End("a", "was closed by the client");
  EXPECT_EQ(directory.open_count(), 0);
  auto found = directory.Find("a");
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(found.status().message(), "session 'a' was closed by the client");
  EXPECT_EQ(directory.NotFoundFor("a").message(), "session 'a' was closed by the client");
}

TEST(SessionDirectoryTest, AnUnknownSessionIsNotFoundAsUnknown) {
  SessionDirectory directory;
  auto found = directory.Find("never");
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(found.status().message(), "session 'never' is unknown"));
  EXPECT_EQ(directory.NotFoundFor("never").code(), StatusCode::kNotFound);
}

TEST(SessionDirectoryTest, EndingASessionThatIsNotOpenLeavesNoTombstone) {
  SessionDirectory directory;
  directory.End("ghost", "expired");
  EXPECT_TRUE(Contains(directory.Find("ghost").status().message(), "is unknown"));
  // Ending twice keeps the first reason.
  ASSERT_TRUE(directory.Add("a", {"enc", "1"}).ok());
  directory.End("a", "was evicted");
  directory.End("a", "expired");
  EXPECT_EQ(directory.Find("a").status().message(), "session 'a' was evicted");
}

TEST(SessionDirectoryTest, AnEndedIdMayBeOpenedAgain) {
  SessionDirectory directory;
  ASSERT_TRUE(directory.Add("a", {"enc", "1"}).ok());
  directory.End("a", "expired");
  ASSERT_TRUE(directory.Add("a", {"enc", "2"}).ok());
  auto a = directory.Find("a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->version, "2");
  // Ended again: the new reason, not the old tombstone's.
  directory.End("a", "was closed by the client");
  EXPECT_EQ(directory.Find("a").status().message(), "session 'a' was closed by the client");
}

TEST(SessionDirectoryTest, OnlyTheMostRecentTombstonesAreKept) {
  SessionDirectory directory;
  const size_t n = SessionDirectory::kMaxTombstones + 1;
  for (size_t i = 0; i < n; ++i) {
    const std::string id = "s" + std::to_string(i);
    ASSERT_TRUE(directory.Add(id, {"enc", "1"}).ok());
    directory.End(id, "expired");
  }
  EXPECT_TRUE(Contains(directory.Find("s0").status().message(), "is unknown"))
      << "the oldest tombstone outlived the bound";
  EXPECT_EQ(directory.Find("s1").status().message(), "session 's1' expired");
  const std::string last = "s" + std::to_string(n - 1);
  EXPECT_EQ(directory.Find(last).status().message(), "session '" + last + "' expired");
}

TEST(SessionDirectoryTest, SessionIdsAreCheckedNamingTheFieldAndTheFault) {
  EXPECT_TRUE(CheckSessionId("a-Z_0.9:x").ok());
  EXPECT_TRUE(CheckSessionId(std::string(kMaxSessionIdLength, 'x')).ok());
  const Status empty = CheckSessionId("", "open.session_id");
  EXPECT_EQ(empty.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(empty.message(), "open.session_id: required");
  const Status long_id = CheckSessionId(std::string(kMaxSessionIdLength + 1, 'x'));
  EXPECT_EQ(long_id.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(long_id.message(), "session_id: 129 characters, a session id is at most 128");
  const Status bad = CheckSessionId("ab/c");
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.message(),
            "session_id: character 2 is 0x2f; a session id is made of [A-Za-z0-9._:-]");
}

// The shared KV store may restore a session that was never here or left for the store, never one
// that was closed, expired or evicted here (its removal from the store may still be queued).
TEST(SessionDirectoryTest, OnlyUnknownOrHandedOverSessionsAreRestorable) {
  SessionDirectory d;
  EXPECT_TRUE(d.Restorable("never-seen"));
  ASSERT_TRUE(d.Add("open", {"m", "1"}).ok());
  EXPECT_FALSE(d.Restorable("open"));
  ASSERT_TRUE(d.Add("closed", {"m", "1"}).ok());
  d.End("closed", "was closed");
  EXPECT_FALSE(d.Restorable("closed"));
  ASSERT_TRUE(d.Add("moved", {"m", "1"}).ok());
  d.End("moved", "moved to another replica", /*restorable=*/true);
  EXPECT_TRUE(d.Restorable("moved"));
  EXPECT_EQ(d.NotFoundFor("moved").message(), "session 'moved' moved to another replica");
  ASSERT_TRUE(d.Add("moved", {"m", "1"}).ok());  // restored here again
  EXPECT_FALSE(d.Restorable("moved"));
  d.End("moved", "was closed");
  EXPECT_FALSE(d.Restorable("moved"));
}

TEST(SessionDirectoryTest, NewSessionIdsAreValidAndDistinct) {
  std::set<std::string> ids;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = NewSessionId();
    ASSERT_EQ(id.size(), 34u) << id;
    ASSERT_EQ(id.substr(0, 2), "s-") << id;
    ASSERT_TRUE(CheckSessionId(id).ok()) << id;
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 1000u);
}

}  // namespace session_directory_test
}  // namespace mha::serve
