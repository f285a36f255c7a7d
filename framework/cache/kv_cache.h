// The key/value caches (KVCache, GrowingCache, StaticCache, attention_mask) are public: a backend
// built outside gengraph keeps one. Framework code includes them by this path.
#pragma once

#include <gengraph/ext/cache.h>
