// Plug-ins, a public header: a shared library that registers backends and decoding parts
// (processors, stopping criteria, strategies) when gengraph loads it, so that the stock `gengraph`
// CLI and any program embedding gengraph select them by name like the built-ins:
//
//   gengraph --plugin ./libmy_parts.so run config.yaml       (repeatable; anywhere on the line)
//   GENGRAPH_PLUGINS=/opt/a.so:/opt/b.so gengraph run config.yaml
//   gengraph::load_plugin("/opt/a.so");                        (a program of one's own)
//
// In one source file of the library (linked against gengraph::core, built as a MODULE or SHARED
// library), name the function that registers its parts:
//
//   #include <gengraph/plugin.h>
//   static void register_parts() { gengraph::BackendRegistry::instance().add(...); ... }
//   GENGRAPH_PLUGIN(register_parts)
//
// See docs/extending.md#plug-ins.
#pragma once

#include <string>
#include <vector>

// The version of the interfaces a plug-in implements, the public headers under <gengraph/ext/>
// (ForwardBackend, StaticDecode, the decoding parts, the registries, the KV caches, the model
// functions). A plug-in built against another version is refused at load, naming both: rebuild it
// against this gengraph.
//   2: the interfaces became public headers of their own. The token history the parts read is
//      TokenHistory (was Sequences), so every part's virtual functions changed their signatures,
//      and a backend reads the model through model_shape() and the other functions of
//      <gengraph/ext/model.h> (CausalLM's class is no longer installed): a plug-in built for 1
//      would fail at load on missing symbols, or call the wrong functions.
//   3: ForwardBackend gained runs_ragged() and forward_ragged() (continuous batching), KVCache
//      attends() and attend() (a paged cache), ForwardBatch logit_positions: the virtual tables
//      and the batch's layout moved.
//   4: SearchStrategy gained top_logprobs(), StepDecision the members top_tokens and top_logprobs,
//      RowwiseSearch a constructor argument and state, Sequence the member top_logprobs (the
//      setting top_logprobs): the virtual tables and those types' layouts moved.
//   5: KVCache gained window_mask(), ForwardBackend max_verify_candidates(), ModelStep
//      reads_window_rings(); ForwardBatch the member window_mask, CacheShape windows, and the
//      growing and static caches their window rings (WindowRings): the virtual tables and those
//      types' layouts moved.
#define GENGRAPH_PLUGIN_ABI 5

#define GENGRAPH_PLUGIN(register_function)                                            \
  extern "C" __attribute__((visibility("default"))) int gengraph_plugin_abi() {       \
    return GENGRAPH_PLUGIN_ABI;                                                       \
  }                                                                                   \
  extern "C" __attribute__((visibility("default"))) void gengraph_plugin_register() { \
    register_function();                                                              \
  }

namespace gengraph {

// Loads the library at `path` and runs its registration, once per library (a second load of the
// same file does nothing). Throws gengraph::Error naming the file and what is wrong: missing, not
// a 64-bit shared library for this machine, cut short or damaged (checked in its ELF headers
// before the dynamic loader maps it), not a loadable library (the loader's reason), not a gengraph
// plug-in (no GENGRAPH_PLUGIN, or its two symbols not functions of the library), built for another
// GENGRAPH_PLUGIN_ABI, or a registration that failed or threw anything (a name already
// registered, ...). A plug-in is trusted code: its own abort(), exit() or crash ends the process;
// `gengraph plugin check LIB.so` tries one in a child process first (docs/extending.md#plug-ins).
void load_plugin(const std::string& path);

// Loads each library the environment variable GENGRAPH_PLUGINS names (paths separated by ':',
// empty entries skipped), in order; an error names the variable and the entry.
void load_plugins_from_environment();

// The plug-ins loaded so far whose registration succeeded, as real paths, in load order.
std::vector<std::string> loaded_plugins();

}  // namespace gengraph
