// gengraph::Model's state, shared by the facades of engine/ (Engine, Scheduler): the loaded model.
#pragma once

#include <gengraph/gengraph.h>

#include "framework/model/loader.h"

namespace gengraph {

struct Model::Impl {
  LoadedModel loaded;
};

}  // namespace gengraph
