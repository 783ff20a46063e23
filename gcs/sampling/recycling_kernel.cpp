// One GCSwR step for a batch on CPU, fused: the eager path in samplers.py makes seven passes
// over [batch, vocab] (rates, arrivals, minimum, update, clamp, ...); this makes two per row
// while the row is in cache. Loaded by gcs/kernels.py, which compiles it on first use.
//
// It computes what RecyclingGumbelSampler's eager path computes, operation for operation,
// with the same vectorised functions (ATen's Vectorized, i.e. Sleef's exp2), so the two
// agree bit for bit wherever torch's own kernels take their vectorised path (tested).

#include <torch/extension.h>

#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>

#include <cmath>
#include <cstdint>
#include <limits>

namespace {

using Vec = at::vec::Vectorized<float>;

// splitmix64, exactly as gcs/noise.py computes it in int64 tensor ops (wrapping, logical shifts).
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// gcs.noise.exponential_noise for one (row key, draw index, token id): -log of a 52-bit uniform.
float exponential_noise(int64_t key, int64_t draw, int64_t token) {
  const uint64_t word = splitmix64(splitmix64(uint64_t(key) + uint64_t(draw)) + uint64_t(token));
  const double uniform = (double(word >> 12) + 0.5) * 0x1p-52;
  return float(-std::log(uniform));
}

}  // namespace

// For each row b: rates p_i = exp2((logits_i - max_b) * log2e) (into `rates`), the first
// token k with the smallest arrival T_i = E_i / p_i, then, if the row is active, the recycling
// update E_i <- max(E_i - T_k p_i, min_residual) and a fresh draw for the winner k. Returns k.
torch::Tensor race_and_recycle(torch::Tensor logits, torch::Tensor row_max, torch::Tensor residual,
                               torch::Tensor rates, torch::Tensor draws, torch::Tensor keys, torch::Tensor active,
                               double log2_e, double min_residual) {
  const int64_t batch = logits.size(0), vocab = logits.size(1);
  TORCH_CHECK(vocab < (int64_t(1) << 24), "vocabulary of ", vocab, " tokens: indices must stay exact in float32");
  for (const auto& t : {logits, residual, rates}) {
    TORCH_CHECK(t.scalar_type() == torch::kFloat && t.is_contiguous() && t.size(0) == batch && t.size(1) == vocab,
                "expected contiguous float32 [", batch, ", ", vocab, "] tensors");
  }
  TORCH_CHECK(draws.scalar_type() == torch::kInt && draws.is_contiguous() && draws.numel() == batch * vocab);
  TORCH_CHECK(keys.scalar_type() == torch::kLong && row_max.scalar_type() == torch::kFloat);
  TORCH_CHECK(active.numel() == 0 || (active.scalar_type() == torch::kBool && active.numel() == batch));

  auto tokens = torch::empty({batch}, keys.options());
  const float* all_logits = logits.data_ptr<float>();
  const float* maxima = row_max.data_ptr<float>();
  const int64_t* row_keys = keys.data_ptr<int64_t>();
  const bool* is_active = active.numel() ? active.data_ptr<bool>() : nullptr;
  float* all_residual = residual.data_ptr<float>();
  float* all_rates = rates.data_ptr<float>();
  int32_t* all_draws = draws.data_ptr<int32_t>();
  int64_t* picked = tokens.data_ptr<int64_t>();
  const float scale = float(log2_e), floor_value = float(min_residual);
  const float infinity = std::numeric_limits<float>::infinity();
  constexpr int64_t width = Vec::size();

  at::parallel_for(0, batch, 1, [&](int64_t first_row, int64_t end_row) {
    for (int64_t b = first_row; b < end_row; ++b) {
      const float* l = all_logits + b * vocab;
      float* e = all_residual + b * vocab;
      float* p = all_rates + b * vocab;
      // samplers.relative_rates: the gap to the row's maximum (exactly 0 for the top token), times log2e, then exp2.
      const Vec max_vec(maxima[b]), scale_vec(scale);

      // Pass 1: rates, and per lane the smallest arrival with its first index (indices as floats: exact below 2**24).
      Vec best_arrival(infinity), best_index(0.0f), index = Vec::arange(0.0f, 1.0f);
      const Vec step = Vec(static_cast<float>(width));
      int64_t i = 0;
      for (; i + width <= vocab; i += width) {
        const Vec rate = ((Vec::loadu(l + i) - max_vec) * scale_vec).exp2();
        rate.store(p + i);
        const Vec arrival = Vec::loadu(e + i) / rate;
        const Vec earlier = arrival < best_arrival;  // strict: a lane keeps its first minimum
        best_arrival = Vec::blendv(best_arrival, arrival, earlier);
        best_index = Vec::blendv(best_index, index, earlier);
        index = index + step;
      }
      float lane_arrival[width], lane_index[width];
      best_arrival.store(lane_arrival);
      best_index.store(lane_index);
      float first_arrival = infinity;
      int64_t winner = vocab;
      for (int64_t lane = 0; lane < width; ++lane) {
        const int64_t at = int64_t(lane_index[lane]);
        if (lane_arrival[lane] < first_arrival || (lane_arrival[lane] == first_arrival && at < winner)) {
          first_arrival = lane_arrival[lane];
          winner = at;
        }
      }
      for (; i < vocab; ++i) {  // the tail, shorter than one vector
        const int64_t rest = vocab - i;
        const Vec rate = ((Vec::loadu(l + i, rest) - max_vec) * scale_vec).exp2();
        rate.store(p + i, rest);
        const Vec arrival = Vec::loadu(e + i, rest) / rate;
        float tail[width];
        arrival.store(tail, rest);
        for (int64_t j = 0; j < rest; ++j) {
          if (tail[j] < first_arrival) {
            first_arrival = tail[j];
            winner = i + j;
          }
        }
        i = vocab;
      }
      // Every arrival is infinite only if every rate is 0, which the caller's max-logit check rules out.
      picked[b] = winner;
      if (is_active != nullptr && !is_active[b]) continue;  // a finished row keeps its state

      // Pass 2: each loser keeps E_i - T_k p_i (the winner's own value is redrawn below).
      const Vec first_vec(first_arrival), floor_vec(floor_value);
      for (i = 0; i + width <= vocab; i += width) {
        const Vec kept = Vec::loadu(e + i) - first_vec * Vec::loadu(p + i);
        at::vec::maximum(kept, floor_vec).store(e + i);
      }
      if (i < vocab) {
        const int64_t rest = vocab - i;
        const Vec kept = Vec::loadu(e + i, rest) - first_vec * Vec::loadu(p + i, rest);
        at::vec::maximum(kept, floor_vec).store(e + i, rest);
      }
      int32_t& draw = all_draws[b * vocab + winner];
      draw += 1;
      e[winner] = exponential_noise(row_keys[b], draw, winner);
    }
  });
  return tokens;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("race_and_recycle", &race_and_recycle, "One fused GCSwR step on CPU (see gcs/kernels.py)");
}
