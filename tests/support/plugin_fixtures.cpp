// Libraries that gengraph must refuse as plug-ins, one per reason (tests/experiments/
// test_plugins.cpp), built from this file with one of:
//   GENGRAPH_TEST_PLUGIN_NO_ENTRY   a shared library without GENGRAPH_PLUGIN
//   GENGRAPH_TEST_PLUGIN_OLD_ABI    GENGRAPH_PLUGIN, built for an ABI other than this gengraph's
//   GENGRAPH_TEST_PLUGIN_CLASH      a registration that fails: it registers a built-in's name
#include <gengraph/plugin.h>

#if defined(GENGRAPH_TEST_PLUGIN_NO_ENTRY)

extern "C" int not_a_gengraph_plugin() { return 1; }

#elif defined(GENGRAPH_TEST_PLUGIN_OLD_ABI)

#undef GENGRAPH_PLUGIN_ABI
#define GENGRAPH_PLUGIN_ABI 0
static void register_nothing() {}
GENGRAPH_PLUGIN(register_nothing)

#elif defined(GENGRAPH_TEST_PLUGIN_CLASH)

#include <memory>

#include "framework/backend/backend_registry.h"

static void register_a_second_eager() {
  gengraph::BackendInfo info;
  info.name = "eager";
  info.description = "a plug-in's backend under a built-in's name";
  info.create = [](std::shared_ptr<const gengraph::CausalLM>,
                   const gengraph::BackendOptions&) -> std::unique_ptr<gengraph::ForwardBackend> {
    return nullptr;
  };
  gengraph::BackendRegistry::instance().add(std::move(info));
}
GENGRAPH_PLUGIN(register_a_second_eager)

#endif
