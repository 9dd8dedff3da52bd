// mha-client --plot against a real mha-server (docs/heads.md): analyze, forward -w --per-head
// (the causal_kpm fixture's inputs and key padding, is_causal, a dropped head), bench and decode
// -w --per-head write their pictures as PNG, SVG and PDF files of the size the client reports;
// an extension that is not one of the three is refused before anything is sent.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "service_test_util.h"

namespace mha::testing {
namespace client_plot_test {

// Runs mha-client with `args` against `target`; its exit code, stdout and stderr in *out.
int RunClient(const std::string& target, const std::string& args, std::string* out) {
  const std::string command =
      std::string(MHA_CLIENT_BINARY) + " -a " + target + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return -1;
  char buffer[4096];
  out->clear();
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) out->append(buffer, n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string Bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream all;
  all << in.rdbuf();
  return all.str();
}

// The "wrote PATH (W x H FORMAT)" line's size.
bool WroteSize(const std::string& out, const std::string& path, const std::string& format, int* w,
               int* h) {
  const size_t at = out.find("wrote " + path + " (");
  return at != std::string::npos &&
         std::sscanf(out.c_str() + at + path.size() + 8, "%d x %d", w, h) == 2 &&
         out.find(" " + format + ")", at) != std::string::npos;
}

uint32_t BigEndian(const std::string& b, size_t at) {
  return (uint32_t{static_cast<uint8_t>(b[at])} << 24) |
         (uint32_t{static_cast<uint8_t>(b[at + 1])} << 16) |
         (uint32_t{static_cast<uint8_t>(b[at + 2])} << 8) | static_cast<uint8_t>(b[at + 3]);
}

size_t Occurrences(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

class ClientPlot : public SharedServerTest<ClientPlot> {
 public:
  static SharedServerSpec Spec() {
    return {{"causal_kpm", "decode_causal"}, "", {"--default-model", "causal_kpm"}};
  }

 protected:
  // Runs mha-client `args` against the server: its exit code, and its output in out_.
  int Run(const std::string& args) { return RunClient(shared_->server->target(), args, &out_); }

  TempDir dir_;
  std::string out_;
  int w_ = 0, h_ = 0;
};

TEST_F(ClientPlot, AnalyzeWritesAPngOfTheSizeItReports) {
  const std::string png = dir_.File("analysis.png");
  ASSERT_EQ(Run("analyze causal_kpm --plot " + png), 0) << out_;
  ASSERT_TRUE(WroteSize(out_, png, "PNG", &w_, &h_)) << out_;
  const std::string bytes = Bytes(png);
  ASSERT_GT(bytes.size(), 24u);
  EXPECT_EQ(bytes.substr(0, 8), "\x89PNG\r\n\x1a\n");
  EXPECT_EQ(bytes.substr(12, 4), "IHDR");
  EXPECT_EQ(BigEndian(bytes, 16), static_cast<uint32_t>(w_));
  EXPECT_EQ(BigEndian(bytes, 20), static_cast<uint32_t>(h_));
}

TEST_F(ClientPlot, ForwardPerHeadWithMasksWritesAnSvg) {
  const std::string svg = dir_.File("maps.svg");
  const std::string io = FixturePath("cases/causal_kpm/io.safetensors");
  ASSERT_EQ(Run("forward -m causal_kpm -i " + io +
                " --causal -w --per-head --head-mask 1,0,1,1 --plot-row 1 --plot " + svg),
            0)
      << out_;
  ASSERT_TRUE(WroteSize(out_, svg, "SVG", &w_, &h_)) << out_;
  const std::string text = Bytes(svg);
  EXPECT_EQ(text.rfind("<?xml", 0), 0u);
  EXPECT_NE(text.find("width=\"" + std::to_string(w_) + "pt\""), std::string::npos);
  EXPECT_NE(text.find("</svg>"), std::string::npos);
  EXPECT_GT(Occurrences(text, "<use xlink:href=\"#glyph"), 100u);  // the text, as glyphs
}

TEST_F(ClientPlot, BenchWritesAPdf) {
  const std::string pdf = dir_.File("bench.pdf");
  ASSERT_EQ(Run("bench -m causal_kpm -b 1 -t 4 -n 20 --warmup 1 --plot " + pdf), 0) << out_;
  ASSERT_TRUE(WroteSize(out_, pdf, "PDF", &w_, &h_)) << out_;
  const std::string bytes = Bytes(pdf);
  EXPECT_EQ(bytes.rfind("%PDF-", 0), 0u);
  EXPECT_NE(bytes.find("%%EOF"), std::string::npos);
}

TEST_F(ClientPlot, DecodeWithPerHeadWeightsWritesTheLatencyAndTheLastStep) {
  const std::string png = dir_.File("decode.png");
  ASSERT_EQ(Run("decode -m decode_causal --sessions 2 --tokens 6 --prefill 4 -w --per-head "
                "--plot " +
                png),
            0)
      << out_;
  ASSERT_TRUE(WroteSize(out_, png, "PNG", &w_, &h_)) << out_;
  EXPECT_EQ(BigEndian(Bytes(png), 20), static_cast<uint32_t>(h_));
  EXPECT_EQ(out_.find("note: --plot draws"), std::string::npos) << out_;  // the step was kept
}

TEST_F(ClientPlot, AnExtensionOfNoFormatIsRefusedBeforeAnythingIsSent) {
  const std::string jpg = dir_.File("maps.jpg");
  EXPECT_NE(Run("forward -m causal_kpm -w --plot " + jpg), 0);
  EXPECT_NE(out_.find("--plot"), std::string::npos) << out_;
  EXPECT_NE(out_.find(".png, .svg or .pdf"), std::string::npos) << out_;
  EXPECT_EQ(out_.find("model causal_kpm"), std::string::npos) << "nothing is sent: " << out_;
  EXPECT_TRUE(Bytes(jpg).empty());
}

}  // namespace client_plot_test
}  // namespace mha::testing
