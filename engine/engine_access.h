// What gengraph's own experiment runner reaches below the public Model (include/gengraph/
// gengraph.h): the loaded model it holds, for the results' model block, the bandwidth figures and
// the peers' model folder. Everything else the runner does through Model and Engine.
#pragma once

#include <gengraph/gengraph.h>

#include "framework/model/loader.h"

namespace gengraph {

struct EngineAccess {
  static const LoadedModel& loaded(const Model& model);
};

}  // namespace gengraph
