#include "framework/decoding/pipeline.h"

#include "framework/decoding/search/rowwise_search.h"

namespace gengraph {

int64_t effective_pad_token(const GenerationConfig& c) {
  if (c.pad_token_id) return *c.pad_token_id;
  if (!c.eos_token_id.empty()) return c.eos_token_id.front();
  return 0;
}

Pipeline build_pipeline(const GenerationConfig& c, int64_t max_length) {
  Pipeline p;
  p.stopping.add(std::make_unique<MaxLengthCriterion>(max_length));
  std::optional<int64_t> finished_pad;
  if (!c.eos_token_id.empty()) {
    p.stopping.add(std::make_unique<EosCriterion>(c.eos_token_id));
    finished_pad = effective_pad_token(c);
  }
  p.strategy = std::make_unique<GreedySearch>(finished_pad);
  return p;
}

}  // namespace gengraph
