#include "client/cli/plot_inputs.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <vector>

#include "mha/tensor_adapter.h"
#include "proto/wire/tensor_codec.h"

namespace mha::client::cli {
namespace {

std::string Shape(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

// A request tensor (a mask) as at::Tensor; undefined when the request has none.
StatusOr<at::Tensor> RequestTensor(bool present, const v1::Tensor& t, const char* field) {
  if (!present) return at::Tensor();
  auto decoded = codec::DecodeTensor(t, field);
  if (!decoded.ok()) return decoded.status();
  return ToTensor(*decoded).clone();  // owns its data past the decoded copy
}

// Where a mask hides a key: BOOL true, or a floating -inf (a finite value only shifts a logit).
at::Tensor Hidden(const at::Tensor& mask) {
  return mask.scalar_type() == at::kBool ? mask : at::isneginf(mask.to(at::kFloat));
}

// The returned weights, top-k scattered onto zeros over S' keys.
StatusOr<at::Tensor> DenseWeights(const ForwardResult& r, const v1::ForwardRequest& request) {
  if (r.topk_values.defined()) {
    const int64_t keys =
        std::max<int64_t>(request.has_key() ? request.key().shape(1) : request.query().shape(1),
                          r.topk_indices.max().item<int64_t>() + 1);
    std::vector<int64_t> shape = r.topk_values.sizes().vec();
    shape.back() = keys;
    return at::zeros(shape, at::kFloat)
        .scatter_(-1, r.topk_indices.to(at::kLong), r.topk_values.to(at::kFloat));
  }
  if (!r.attn_weights.defined()) {
    return InvalidArgument("--plot: the answer has no attention weights (ask for them with -w)");
  }
  return r.attn_weights.to(at::kFloat);
}

// The model's head index of each returned panel (weights_heads, else 0..panels-1).
std::vector<int64_t> PanelHeads(const v1::ForwardRequest& request, int64_t panels) {
  std::vector<int64_t> heads;
  for (int64_t p = 0; p < panels; ++p) {
    heads.push_back(request.weights_heads_size() > p ? request.weights_heads(p) : p);
  }
  return heads;
}

struct MaskInputs {
  at::Tensor key_padding, attn;  // undefined when not sent
  bool causal = false;
  int64_t batch = 1;  // B: a [B * H, T, S] attn_mask holds batch row b's heads at b * H ..
};

// Which cells of batch row `row` the request's masks hide: [panels or 1, rows, keys] BOOL, rows
// from query position `first_row`. `heads`: the model's head of each panel when the weights are
// per head; empty when averaged (a cell then counts as masked when every head hides it). Keys
// past the masks' S (add_bias_kv, add_zero_attn) are never hidden.
at::Tensor MaskedCells(const MaskInputs& m, int64_t row, int64_t first_row, int64_t rows,
                       int64_t keys, const std::vector<int64_t>& heads) {
  at::Tensor hidden = at::zeros({1, rows, keys}, at::kBool);
  auto cover = [&](const at::Tensor& part) {  // [1 or panels, rows, S], S <= keys
    const int64_t s = std::min(keys, part.size(-1));
    hidden = at::logical_or(
        hidden,
        at::constant_pad_nd(part.slice(-1, 0, s).to(at::kInt), {0, keys - s}, 0).to(at::kBool));
  };
  if (m.key_padding.defined()) {
    cover(Hidden(m.key_padding)[row].view({1, 1, -1}).expand({1, rows, -1}));
  }
  if (m.attn.defined()) {
    at::Tensor a = Hidden(m.attn).slice(-2, first_row, first_row + rows);
    if (a.dim() == 2) {
      a = a.unsqueeze(0);
    } else {  // [B * H, rows, S] -> batch row `row`'s heads [H, rows, S]
      a = a.view({m.batch, -1, a.size(1), a.size(2)})[row];
      a = heads.empty() ? a.all(0, /*keepdim=*/true)
                        : a.index_select(0, at::tensor(heads, at::kLong));
    }
    cover(a);
  }
  if (m.causal) {  // triu(ones(T, S), 1): key k hidden from query position q when k > q
    const at::Tensor q = at::arange(first_row, first_row + rows, at::kLong).unsqueeze(1);
    cover((at::arange(keys, at::kLong).unsqueeze(0) > q).unsqueeze(0));
  }
  return hidden;
}

std::vector<uint8_t> Bytes(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kByte).contiguous();
  return {c.data_ptr<uint8_t>(), c.data_ptr<uint8_t>() + c.numel()};
}

std::vector<float> Floats(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kFloat).contiguous();
  return {c.data_ptr<float>(), c.data_ptr<float>() + c.numel()};
}

// Sets maps->masked (and the legend) from the request's masks; `asked` gets what was sent.
Status AddMasks(const v1::ForwardRequest& request, int64_t row, const std::vector<int64_t>& heads,
                plot::AttentionMaps* maps, std::vector<std::string>* asked) {
  MaskInputs m;
  auto kpm =
      RequestTensor(request.has_key_padding_mask(), request.key_padding_mask(), "key_padding_mask");
  if (!kpm.ok()) return kpm.status();
  auto attn = RequestTensor(request.has_attn_mask(), request.attn_mask(), "attn_mask");
  if (!attn.ok()) return attn.status();
  m.key_padding = *kpm;
  m.attn = *attn;
  m.causal = request.is_causal();
  m.batch = request.query().shape_size() > 0 ? request.query().shape(0) : 1;
  if (m.causal) asked->push_back("is_causal");
  if (m.key_padding.defined()) asked->push_back("key_padding_mask " + Shape(m.key_padding));
  if (m.attn.defined()) asked->push_back("attn_mask " + Shape(m.attn));
  if (asked->empty()) return Status::Ok();
  const at::Tensor hidden = MaskedCells(m, row, maps->first_row, maps->rows, maps->keys, heads);
  maps->masked = Bytes(hidden);
  std::string legend = "masked position (";
  for (size_t i = 0; i < asked->size(); ++i) {
    legend += (i ? ", " : "") + (*asked)[i].substr(0, (*asked)[i].find(' '));
  }
  maps->masked_legend = legend + ")";
  return Status::Ok();
}

// Panel names ("head 3", "mean of the heads") and heads masked by head_mask (0 for batch row
// `row`); a head_mask value other than 0 and 1 is named in its panel.
Status NamePanels(const v1::ForwardRequest& request, int64_t row, const std::vector<int64_t>& heads,
                  plot::AttentionMaps* maps) {
  auto mask = RequestTensor(request.has_head_mask(), request.head_mask(), "head_mask");
  if (!mask.ok()) return mask.status();
  at::Tensor factors;  // [H] for this batch row
  if (mask->defined()) factors = (mask->dim() == 2 ? (*mask)[row] : *mask).to(at::kDouble);
  if (heads.empty()) {
    std::string name = "mean of the heads";
    if (request.weights_heads_size() > 0) {
      name = "mean of heads";
      for (int64_t h : request.weights_heads()) name += " " + std::to_string(h);
    }
    maps->panels = {name};
    if (factors.defined()) maps->notes.push_back("head_mask applied before the mean");
    return Status::Ok();
  }
  for (int64_t h : heads) {
    std::string name = "head " + std::to_string(h);
    bool dropped = false;
    if (factors.defined() && h < factors.size(0)) {
      const double f = factors[h].item<double>();
      dropped = f == 0;
      if (f != 1) name += " (head_mask " + plot::ValueText(f) + ")";
    }
    maps->panels.push_back(name);
    maps->panel_masked.push_back(dropped ? 1 : 0);
  }
  maps->panel_masked_legend = "head dropped by head_mask 0";
  return Status::Ok();
}

}  // namespace

StatusOr<plot::AttentionMaps> ForwardMaps(const ForwardResult& r, const v1::ForwardRequest& request,
                                          int64_t row) {
  auto dense = DenseWeights(r, request);
  if (!dense.ok()) return dense.status();
  at::Tensor w = *dense;  // [B, T', S'] averaged or [B, P, T', S'] per head
  const int64_t batch = w.size(0);
  if (row < 0 || row >= batch) {
    return InvalidArgument("--plot-row: " + std::to_string(row) + " is outside the batch of " +
                           std::to_string(batch) + " rows (0.." + std::to_string(batch - 1) + ")");
  }
  const bool per_head = w.dim() == 4;
  w = per_head ? w[row] : w[row].unsqueeze(0);
  plot::AttentionMaps maps;
  maps.rows = w.size(1);
  maps.keys = w.size(2);
  maps.weights = Floats(w);
  maps.first_row = request.has_weights_query_begin() ? request.weights_query_begin() : 0;
  const std::vector<int64_t> heads =
      per_head ? PanelHeads(request, w.size(0)) : std::vector<int64_t>{};
  maps.title = "model " + r.model + " v" + r.model_version + ": attention weights, batch row " +
               std::to_string(row) + " of " + std::to_string(batch);
  maps.notes.push_back(std::string(per_head ? "per head" : "averaged over heads") +
                       "; query positions " + std::to_string(maps.first_row) + ".." +
                       std::to_string(maps.first_row + maps.rows - 1) + " down, keys 0.." +
                       std::to_string(maps.keys - 1) + " across");
  std::vector<std::string> asked;
  MHA_RETURN_IF_ERROR(AddMasks(request, row, heads, &maps, &asked));
  if (!asked.empty()) {
    std::string line = "masks sent:";
    for (const auto& a : asked) line += " " + a + (&a == &asked.back() ? "" : ",");
    maps.notes.push_back(line);
  }
  if (r.topk_values.defined()) {
    maps.notes.push_back("top-k: the " + std::to_string(r.topk_values.size(-1)) +
                         " largest weights of each row; the others are drawn as 0");
  }
  MHA_RETURN_IF_ERROR(NamePanels(request, row, heads, &maps));
  return maps;
}

StatusOr<plot::AttentionMaps> StepMaps(const at::Tensor& weights, int64_t row,
                                       const std::string& title) {
  const bool averaged = weights.dim() == 3 && weights.size(1) == 1;
  if (!averaged && !(weights.dim() == 4 && weights.size(2) == 1)) {
    return InvalidArgument("decode --plot: a step's weights are [B, 1, L] or [B, H, 1, L], got " +
                           Shape(weights));
  }
  if (row < 0 || row >= weights.size(0)) {
    return InvalidArgument("--plot-row: " + std::to_string(row) + " is outside the batch of " +
                           std::to_string(weights.size(0)) + " rows");
  }
  const at::Tensor w = averaged ? weights[row] : weights[row].squeeze(1);  // [H or 1, L]
  plot::AttentionMaps maps;
  maps.title = title;
  maps.rows = w.size(0);
  maps.keys = w.size(1);
  maps.weights = Floats(w);
  maps.panels = {"batch row " + std::to_string(row)};
  for (int64_t h = 0; h < maps.rows; ++h) {
    maps.row_names.push_back(averaged ? "mean" : "h" + std::to_string(h));
  }
  maps.notes = {"the last step's new token over the session's " + std::to_string(maps.keys) +
                " cached positions (the last one is its own); " +
                (averaged ? "averaged over heads" : "per head")};
  maps.row_axis = averaged ? "" : "head";
  maps.key_axis = "cached position";
  return maps;
}

plot::HeadAnalysisData AnalysisData(const v1::ModelAnalysis& a) {
  const v1::ProjectionAnalysis& p = a.output_projection();
  plot::HeadAnalysisData d;
  d.title = "model " + a.model() + " v" + a.model_version() +
            ": W^O head analysis (E=" + std::to_string(a.embed_dim()) +
            ", H=" + std::to_string(a.num_heads()) + ", head_dim=" + std::to_string(a.head_dim()) +
            ")";
  d.notes = {
      "importance: the Frobenius norm of each head's block of W^O, as a share of their sum",
      "effective rank: exp(entropy of the normalised singular values) of each block (whole W^O: " +
          plot::ValueText(p.effective_rank()) + " of " + std::to_string(p.max_rank()) + ")",
      "correlation: Pearson correlation of two heads' flattened blocks (high = redundant heads)"};
  d.importance.assign(p.head_importance().begin(), p.head_importance().end());
  d.effective_rank.assign(p.head_effective_rank().begin(), p.head_effective_rank().end());
  d.max_rank = static_cast<double>(p.head_max_rank());
  d.correlation.assign(p.head_correlation().begin(), p.head_correlation().end());
  return d;
}

plot::LatencySamples BenchSamples(const BenchReport& r) {
  plot::LatencySamples s;
  s.latency_us = r.sample_latency_us;
  s.done_s = r.sample_done_s;
  s.p50_us = r.latency.p50_us;
  s.p90_us = r.latency.p90_us;
  s.p99_us = r.latency.p99_us;
  s.seconds = r.seconds;
  s.unit = "requests";
  return s;
}

plot::LatencySamples DecodeSamples(const DecodeBenchReport& r) {
  plot::LatencySamples s;
  s.latency_us = r.sample_latency_us;
  s.done_s = r.sample_done_s;
  s.p50_us = r.latency.p50_us;
  s.p90_us = r.latency.p90_us;
  s.p99_us = r.latency.p99_us;
  s.seconds = r.seconds;
  s.unit = "steps";
  return s;
}

CLI::Option* AddPlotOption(CLI::App* cmd, std::string* path, const std::string& what) {
  return cmd
      ->add_option("--plot", *path,
                   what + "; FILE is a .png, .svg or .pdf (the format follows the extension)")
      ->type_name("FILE")
      ->check(CLI::Validator(
          [](std::string& p) {  // CLI11 names the option before the message
            auto format = plot::FormatOfPath(p, "");
            return format.ok() ? std::string() : format.status().message().substr(2);
          },
          ""));
}

Status WritePlot(const std::string& path, const std::vector<const plot::Figure*>& figures,
                 FILE* out) {
  auto written = plot::WriteFigures(path, "--plot", figures);
  if (!written.ok()) return written.status();
  auto format = plot::FormatOfPath(path, "--plot");
  const char* name = *format == plot::ImageFormat::kPng   ? "PNG"
                     : *format == plot::ImageFormat::kSvg ? "SVG"
                                                          : "PDF";
  std::fprintf(out, "wrote %s (%d x %d %s)\n", path.c_str(), written->width, written->height, name);
  return Status::Ok();
}

Status PlotLoad(const std::string& path, plot::LatencySamples samples, const std::string& title,
                const std::string& note, FILE* out) {
  samples.title = title;
  samples.notes = {note};
  auto figure = plot::LatencyFigure::Make(std::move(samples));
  if (!figure.ok()) return figure.status();
  return WritePlot(path, {&figure.value()}, out);
}

Status PlotDecode(const std::string& path, const DecodeBenchOptions& o, const DecodeBenchReport& r,
                  int64_t row, FILE* out) {
  const char* mode = o.stateless       ? " (stateless)"
                     : o.stream        ? " (stream)"
                     : o.fork > 0      ? " (fork)"
                     : o.speculate > 0 ? " (speculate)"
                                       : "";
  plot::LatencySamples samples = DecodeSamples(r);
  samples.title = "decode" + std::string(mode) + ": " + std::to_string(o.sessions) +
                  " sessions x " + std::to_string(o.tokens) + " steps";
  samples.notes = {"model " + (o.model.empty() ? std::string("(default)") : o.model) + ", B=" +
                   std::to_string(o.batch) + ", E=" + std::to_string(r.embed_dim) + ", prefill " +
                   std::to_string(o.prefill) + "; each step's latency as the client saw it"};
  auto latency = plot::LatencyFigure::Make(std::move(samples));
  if (!latency.ok()) return latency.status();
  std::vector<const plot::Figure*> figures{&latency.value()};
  std::optional<plot::AttentionFigure> step;
  if (r.last_step_weights.shape_size() > 0) {
    auto decoded = codec::DecodeTensor(r.last_step_weights, "attn_weights");
    if (!decoded.ok()) return decoded.status();
    auto maps = StepMaps(ToTensor(*decoded), row,
                         "session 0's last step: attention over its " +
                             std::to_string(r.last_step_tokens) + " cached tokens");
    if (!maps.ok()) return maps.status();
    auto figure = plot::AttentionFigure::Make(std::move(maps.value()));
    if (!figure.ok()) return figure.status();
    step = std::move(figure.value());
    figures.push_back(&*step);
  } else if (o.need_weights) {
    std::fprintf(out,
                 "note: --plot draws the last step's weights of plain sessions only (not with "
                 "--stateless, --fork or --speculate)\n");
  }
  return WritePlot(path, figures, out);
}

}  // namespace mha::client::cli
