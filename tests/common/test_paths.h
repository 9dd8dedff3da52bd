// Where the tests find the checkout and the build. The absolute paths of this checkout and build
// folder are compiled into one small generated unit (build/tests/test_paths.cc, written by
// tests/CMakeLists.txt) instead of compile definitions on every test unit: a clone in another
// folder then compiles every test unit with the same flags, and the compiler cache
// (scripts/build.sh, paths relative to the checkout) serves them.
#pragma once

namespace mha::testing::paths {

const char* FixturesDir();       // tests/fixtures
const char* SourceDir();         // the checkout
const char* ServerBinary();      // mha-server ("" in a build without the service)
const char* TestServerBinary();  // mha-test-server (tests/service/mha_test_server.cc)
const char* ClientBinary();      // mha-client
const char* MakeTestCerts();     // tests/service/make_test_certs.sh

}  // namespace mha::testing::paths

// The names the tests use (formerly compile definitions).
#define MHA_FIXTURES_DIR (::mha::testing::paths::FixturesDir())
#define MHA_SOURCE_DIR (::mha::testing::paths::SourceDir())
#define MHA_SERVER_BINARY (::mha::testing::paths::ServerBinary())
#define MHA_TEST_SERVER_BINARY (::mha::testing::paths::TestServerBinary())
#define MHA_CLIENT_BINARY (::mha::testing::paths::ClientBinary())
#define MHA_MAKE_TEST_CERTS (::mha::testing::paths::MakeTestCerts())
