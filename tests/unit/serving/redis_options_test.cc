// --kv-store's URL and the password's sources (sessions/redis/redis_options.h): parsed strictly,
// every refusal names the flag and the part, and the password never appears in a message.
#include "server/serving/sessions/redis/redis_options.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace mha::serve {
namespace redis_options_test {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(RedisUrl, HostPortAndDatabase) {
  auto a = ParseRedisUrl("redis://127.0.0.1:6379");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 6379);
  EXPECT_EQ(a->db, 0);
  auto b = ParseRedisUrl("redis://redis-0.redis.mha.svc:6380/3");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->host, "redis-0.redis.mha.svc");
  EXPECT_EQ(b->port, 6380);
  EXPECT_EQ(b->db, 3);
  EXPECT_EQ(b->Describe(), "redis://redis-0.redis.mha.svc:6380/3");
  auto v6 = ParseRedisUrl("redis://[::1]:7000/1");
  ASSERT_TRUE(v6.ok()) << v6.status().ToString();
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->Describe(), "redis://[::1]:7000/1");
}

TEST(RedisUrl, EveryMalformedPartIsNamed) {
  const std::pair<const char*, const char*> cases[] = {
      {"http://host:6379", "does not start with redis://"},
      {"redis://host", "no port"},
      {"redis://:6379", "host ''"},
      {"redis://ho_st:6379", "host 'ho_st'"},
      {"redis://host:0", "port '0'"},
      {"redis://host:65536", "port '65536'"},
      {"redis://host:63a9", "port '63a9'"},
      {"redis://host:", "port ''"},
      {"redis://host:6379/x", "database 'x'"},
      {"redis://host:6379/", "database ''"},
      {"redis://host:6379/-1", "database '-1'"},
      {"redis://host:6379/99999999999", "database '99999999999'"},
      {"redis://host:6379?db=1", "query or fragment"},
      {"redis://[::1:6379", "IPv6"},
      {"redis://[zz]:6379", "not an IPv6"},
  };
  for (const auto& [url, part] : cases) {
    auto a = ParseRedisUrl(url, "--kv-store");
    ASSERT_FALSE(a.ok()) << url;
    EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument) << url;
    EXPECT_TRUE(Contains(a.status().message(), "--kv-store: ")) << a.status().message();
    EXPECT_TRUE(Contains(a.status().message(), part)) << url << ": " << a.status().message();
  }
}

TEST(RedisUrl, APasswordInTheUrlIsRefusedWithoutEchoingIt) {
  auto a = ParseRedisUrl("redis://:hunter2@host:6379");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(Contains(a.status().message(), "hunter2")) << a.status().message();
  EXPECT_TRUE(Contains(a.status().message(), "--kv-store-password-file"));
}

TEST(RedisPassword, FromAFileItsFirstLine) {
  char path[] = "/tmp/mha-redis-pass-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << "s3cret\r\nignored\n";
  auto p = LoadRedisPassword({path, ""});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(*p, "s3cret");
  std::ofstream(path) << "";
  auto empty = LoadRedisPassword({path, ""});
  ASSERT_FALSE(empty.ok());
  EXPECT_TRUE(Contains(empty.status().message(), "is empty"));
  std::remove(path);
  auto missing = LoadRedisPassword({path, ""});
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(Contains(missing.status().message(), "--kv-store-password-file: cannot read"));
  EXPECT_TRUE(Contains(missing.status().message(), "No such file"));
}

TEST(RedisPassword, FromTheEnvironmentNeverEchoed) {
  setenv("MHA_TEST_REDIS_PASSWORD", "t0psecret", 1);
  auto p = LoadRedisPassword({"", "MHA_TEST_REDIS_PASSWORD"});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(*p, "t0psecret");
  unsetenv("MHA_TEST_REDIS_PASSWORD");
  auto unset = LoadRedisPassword({"", "MHA_TEST_REDIS_PASSWORD"});
  ASSERT_FALSE(unset.ok());
  EXPECT_TRUE(Contains(unset.status().message(), "'MHA_TEST_REDIS_PASSWORD' is unset or empty"));
}

TEST(RedisPassword, NoneOrBothSources) {
  auto none = LoadRedisPassword({"", ""});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, "");
  auto both = LoadRedisPassword({"/etc/x", "X"});
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(both.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(both.status().message(), "at most one"));
}

}  // namespace redis_options_test
}  // namespace mha::serve
