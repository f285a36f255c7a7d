// Libraries that gengraph must refuse as plug-ins, one per reason (tests/experiments/
// test_plugins.cpp), built from this file with one of:
//   GENGRAPH_TEST_PLUGIN_NO_ENTRY   a shared library without GENGRAPH_PLUGIN
//   GENGRAPH_TEST_PLUGIN_OLD_ABI    GENGRAPH_PLUGIN, built for an ABI other than this gengraph's
//   GENGRAPH_TEST_PLUGIN_CLASH      a registration that fails: it registers a built-in's name
//   GENGRAPH_TEST_PLUGIN_ABI_VARIABLE  gengraph_plugin_abi defined as a variable, not a function
//   GENGRAPH_TEST_PLUGIN_THROWS_INT    a registration that throws an int (not a std::exception)
// and, for `gengraph plugin check` (which tries one in a child process), plug-ins whose own code
// ends the process or never returns:
//   GENGRAPH_TEST_PLUGIN_ABORTS     a registration that calls abort()
//   GENGRAPH_TEST_PLUGIN_EXITS      a registration that calls exit(0)
//   GENGRAPH_TEST_PLUGIN_HANGS      a registration that sleeps for an hour
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

#elif defined(GENGRAPH_TEST_PLUGIN_ABI_VARIABLE)

// What GENGRAPH_PLUGIN would define, with the ABI number as data: called, it would run data.
extern "C" __attribute__((visibility("default"))) int gengraph_plugin_abi = GENGRAPH_PLUGIN_ABI;
extern "C" __attribute__((visibility("default"))) void gengraph_plugin_register() {}

#elif defined(GENGRAPH_TEST_PLUGIN_THROWS_INT)

static void register_by_throwing_an_int() { throw 42; }
GENGRAPH_PLUGIN(register_by_throwing_an_int)

#elif defined(GENGRAPH_TEST_PLUGIN_ABORTS)

#include <cstdlib>
static void register_by_aborting() { std::abort(); }
GENGRAPH_PLUGIN(register_by_aborting)

#elif defined(GENGRAPH_TEST_PLUGIN_EXITS)

#include <cstdlib>
static void register_by_exiting() { std::exit(0); }
GENGRAPH_PLUGIN(register_by_exiting)

#elif defined(GENGRAPH_TEST_PLUGIN_HANGS)

#include <unistd.h>
static void register_never() { ::sleep(3600); }
GENGRAPH_PLUGIN(register_never)

#endif
