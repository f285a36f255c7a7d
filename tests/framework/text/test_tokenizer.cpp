// The native tokenizer against the `tokenizers` and `sentencepiece` libraries: every family of
// tools/make_family_tokenizers.py (and the set-up's real SmolLM2 tokenizer when it is there) on
// tools/make_tokenizer_corpus.py's 12,000 lines, ids with and without special tokens, decoded text,
// and streaming. The expected values are made at test time by tools/tokenizer_oracle.py with the
// pinned environment; nothing here is hand-written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "framework/model/known_models.h"
#include "framework/text/tokenizer.h"
#include "framework/text/utf8.h"
#include "framework/util/error.h"
#include "framework/util/json_at.h"
#include "framework/util/locks.h"
#include "tests/support/test_util.h"
#include "tests/support/whole_characters.h"

namespace gengraph {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

std::string python() { return std::string(GENGRAPH_SOURCE_DIR) + "/.venv/bin/python"; }
std::string tool(const std::string& name) {
  return std::string(GENGRAPH_SOURCE_DIR) + "/tools/" + name;
}

// Throws (the test fails, and nothing after it marks the assets complete) when `command` fails.
void run_or_fail(const std::string& command) {
  const int rc = std::system((command + " >/dev/null 2>&1").c_str());
  if (rc != 0)
    throw std::runtime_error("command failed (status " + std::to_string(rc) + "): " + command);
}

std::string unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  }
  return out;
}

// One corpus, the family tokenizers and the oracle's outputs, made once (about a minute of
// Python) in a folder that every test process shares: CTest runs each test in its own process. The
// folder's name carries a hash of the tools and the pinned requirements, so a change to either
// makes a new one; a lock keeps two processes from making it at once.
class TokenizerParity : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string key;
    for (const char* f : {"tools/make_tokenizer_corpus.py", "tools/make_family_tokenizers.py",
                          "tools/tokenizer_oracle.py", "tools/requirements.txt"}) {
      key += testing::read_file(fs::path(GENGRAPH_SOURCE_DIR) / f);
    }
    dir_ =
        new fs::path(fs::temp_directory_path() / ("gengraph-tokenizer-parity-" +
                                                  std::to_string(std::hash<std::string>()(key))));
    fs::create_directories(*dir_);
    {
      FileLock lock(*dir_ / ".lock", "the tokenizer parity assets");
      if (!fs::exists(*dir_ / ".complete")) {
        run_or_fail(python() + " " + tool("make_tokenizer_corpus.py") + " " +
                    (*dir_ / "corpus.hex").string());
        run_or_fail(python() + " " + tool("make_family_tokenizers.py") + " " +
                    (*dir_ / "fam").string());
        testing::write_file(*dir_ / ".complete", "");
      }
    }
    std::ifstream in(*dir_ / "corpus.hex");
    std::string line;
    corpus_ = new std::vector<std::string>();
    while (std::getline(in, line)) corpus_->push_back(unhex(line));
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete corpus_;
    dir_ = nullptr;
    corpus_ = nullptr;
  }

  // The oracle's output for `file`, with or without special tokens (made once, under the lock).
  static nlohmann::json oracle(const fs::path& file, bool special) {
    const std::string name = std::to_string(std::hash<std::string>()(file.string()));
    const fs::path out = *dir_ / (name + (special ? ".json" : ".ns.json"));
    {
      FileLock lock(*dir_ / ".lock", "the tokenizer parity assets");
      if (!fs::exists(out)) {
        run_or_fail(python() + " " + tool("tokenizer_oracle.py") + " --tokenizer " + file.string() +
                    " --corpus " + (*dir_ / "corpus.hex").string() + " --out " + out.string() +
                    (special ? "" : " --no-special"));
      }
    }
    std::ifstream in(out);
    return nlohmann::json::parse(in);
  }

  // Every line: ids as the library gives them (both modes), decode as the library decodes, and
  // the stream's pieces (each valid UTF-8) adding up to the decoded text.
  static void check(const Tokenizer& tok, const fs::path& file) {
    ASSERT_GE(corpus_->size(), 10000u);
    for (const bool special : {true, false}) {
      const nlohmann::json expected = oracle(file, special);
      ASSERT_FALSE(::testing::Test::HasFatalFailure());
      ASSERT_EQ(expected.at("ids").size(), corpus_->size());
      size_t id_mismatches = 0, text_mismatches = 0, stream_mismatches = 0;
      for (size_t i = 0; i < corpus_->size(); ++i) {
        const auto ids = tok.encode((*corpus_)[i], special);
        const auto want = expected["ids"][i].get<std::vector<int64_t>>();
        if (ids != want && id_mismatches++ < 3) {
          ADD_FAILURE() << file << " line " << i << " (special " << special
                        << "): " << JsonAt::quoted((*corpus_)[i]) << "\n  library "
                        << nlohmann::json(want) << "\n  native  " << nlohmann::json(ids);
        }
        const std::string text = tok.decode(want, false);
        if (text != expected["decoded"][i].get<std::string>() && text_mismatches++ < 3) {
          ADD_FAILURE() << file << " line " << i << ": decoded " << JsonAt::quoted(text)
                        << ", library "
                        << JsonAt::quoted(expected["decoded"][i].get<std::string>());
        }
        if (special) {
          TextStream stream(tok);
          std::string streamed;
          bool pieces_valid = true;
          for (const int64_t id : want) {
            const std::string piece = stream.push(id);
            pieces_valid = pieces_valid && utf8::is_valid(piece);
            streamed += piece;
          }
          streamed += stream.finish();
          if ((streamed != text || !pieces_valid) && stream_mismatches++ < 3) {
            ADD_FAILURE() << file << " line " << i << ": streamed " << JsonAt::quoted(streamed)
                          << " (pieces valid UTF-8: " << pieces_valid << "), decoded "
                          << JsonAt::quoted(text);
          }
        }
      }
      EXPECT_EQ(id_mismatches, 0u) << file << " special " << special;
      EXPECT_EQ(text_mismatches, 0u) << file;
      EXPECT_EQ(stream_mismatches, 0u) << file;
    }
  }

  static fs::path family(const std::string& name) {
    return *dir_ / "fam" / name / "tokenizer.json";
  }

  static fs::path* dir_;
  static std::vector<std::string>* corpus_;
};
fs::path* TokenizerParity::dir_ = nullptr;
std::vector<std::string>* TokenizerParity::corpus_ = nullptr;

TEST_F(TokenizerParity, Gpt2ByteLevel) {
  check(*load_tokenizer_json(family("gpt2")), family("gpt2"));
}
TEST_F(TokenizerParity, SmolLM2DigitsAndByteLevel) {
  check(*load_tokenizer_json(family("smollm2")), family("smollm2"));
}
TEST_F(TokenizerParity, Llama3SplitIgnoreMerges) {
  check(*load_tokenizer_json(family("llama3")), family("llama3"));
}
TEST_F(TokenizerParity, Qwen2NfcSplit) {
  check(*load_tokenizer_json(family("qwen2")), family("qwen2"));
}
TEST_F(TokenizerParity, Llama2ByteFallback) {
  check(*load_tokenizer_json(family("llama2")), family("llama2"));
}
TEST_F(TokenizerParity, MistralMetaspace) {
  check(*load_tokenizer_json(family("mistral")), family("mistral"));
}
TEST_F(TokenizerParity, SentencePieceModel) {
  const fs::path model = *dir_ / "fam" / "spm" / "tokenizer.model";
  check(*load_sentencepiece_model(model, true), model);
}

// Text cut by a token limit ends at the last whole character (issue 55), in the byte-fallback
// families (tokenizer.json's and libsentencepiece's) and the byte-level one.
std::vector<std::string> lines_with_wide_characters(const std::vector<std::string>& corpus) {
  std::vector<std::string> lines;
  for (const auto& line : corpus) {
    if (lines.size() < 300 && line.size() < 120 && utf8::is_valid(line) &&
        std::any_of(line.begin(), line.end(), [](char c) { return (c & 0x80) != 0; })) {
      lines.push_back(line);  // lines with characters of more than one byte
    }
  }
  return lines;
}

TEST_F(TokenizerParity, EveryPrefixEndsAtTheLastWholeCharacter) {
  const auto lines = lines_with_wide_characters(*corpus_);
  ASSERT_GE(lines.size(), 50u);
  for (const char* name : {"llama2", "gpt2"}) {
    EXPECT_GT(testing::check_whole_characters(*load_tokenizer_json(family(name)), lines, name), 0u);
  }
}

// The same for a tokenizer.model (libsentencepiece's module, which the sanitizer build cannot open:
// scripts/sanitize.sh leaves out the tests named *SentencePiece*).
TEST_F(TokenizerParity, SentencePieceModelPrefixesEndAtTheLastWholeCharacter) {
  const auto lines = lines_with_wide_characters(*corpus_);
  ASSERT_GE(lines.size(), 50u);
  const fs::path spm = *dir_ / "fam" / "spm" / "tokenizer.model";
  EXPECT_GT(testing::check_whole_characters(*load_sentencepiece_model(spm, true), lines, "spm"),
            0u);
}

// The set-up's real model (scripts/setup.sh converts it; GENGRAPH_CACHE or ~/.cache/gengraph).
TEST_F(TokenizerParity, RealSmolLM2Tokenizer) {
  const KnownModelStatus status = known_model_status("smollm2-135m");
  if (!status.ready) {
    GTEST_SKIP() << "the real model is not set up here ("
                 << (status.unavailable_reason.empty() ? "run scripts/setup.sh"
                                                       : status.unavailable_reason)
                 << ")";
  }
  const fs::path file = status.folder / "tokenizer.json";
  const auto tok = load_tokenizer(status.folder);
  check(*tok, file);
  // The instruct model's chat markers are special tokens, and known by name.
  const int64_t im_start = tok->token_id("<|im_start|>");
  EXPECT_GE(im_start, 0);
  EXPECT_TRUE(tok->is_special(im_start));
  EXPECT_EQ(tok->decode(tok->encode("The capital of France is")), "The capital of France is");
}

// --- UTF-8 ---------------------------------------------------------------------------------------

TEST(Utf8, RepairsAsPythonReplaceDoes) {
  const std::string r(utf8::kReplacement);
  EXPECT_EQ(utf8::repair("abc"), "abc");
  EXPECT_EQ(utf8::repair("\xED\xA0\x80"), r + r + r);  // a surrogate: three maximal subparts
  EXPECT_EQ(utf8::repair("\xC0\xAF"), r + r);          // an overlong: C0 never starts a sequence
  EXPECT_EQ(utf8::repair("\xE2\x82"
                         "A"),
            r + "A");  // a cut sequence is one U+FFFD
  EXPECT_EQ(utf8::repair("\xF0\x9F\x98"), r);
  EXPECT_EQ(utf8::repair("\xF5\xFF"), r + r);
  EXPECT_EQ(utf8::repair("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
}

TEST(Utf8, CompletePrefixStopsBeforeAnUnfinishedCharacter) {
  EXPECT_EQ(utf8::complete_prefix("ab\xF0\x9F\x98"), 2u);
  EXPECT_EQ(utf8::complete_prefix("ab\xF0\x9F\x98\x80"), 6u);
  EXPECT_EQ(utf8::complete_prefix("ab\xC3"), 2u);
  EXPECT_EQ(utf8::complete_prefix("ab\x80"), 3u);  // invalid for good: shown as U+FFFD
}

// --- refusals ------------------------------------------------------------------------------------

std::string error_of(const nlohmann::json& doc) {
  TempDir dir;
  testing::write_file(dir / "tokenizer.json", doc.dump());
  try {
    load_tokenizer_json(dir / "tokenizer.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

nlohmann::json minimal() {
  return {
      {"version", "1.0"},
      {"added_tokens", nlohmann::json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}}}, {"merges", {"a b"}}}}};
}

TEST(TokenizerJson, AMinimalFileWorks) {
  TempDir dir;
  testing::write_file(dir / "tokenizer.json", minimal().dump());
  const auto tok = load_tokenizer_json(dir / "tokenizer.json");
  EXPECT_EQ(tok->encode("abab"), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(tok->decode({2, 0}), "aba");
  EXPECT_EQ(tok->vocab_size(), 3);
}

TEST(TokenizerJson, RefusesUnsupportedComponentsByName) {
  const std::vector<std::pair<std::string, nlohmann::json>> cases = {
      {"model 'Unigram'", {{"model", {{"type", "Unigram"}, {"vocab", nlohmann::json::array()}}}}},
      {"pre-tokenizer 'BertPreTokenizer'", {{"pre_tokenizer", {{"type", "BertPreTokenizer"}}}}},
      {"normalizer 'BertNormalizer'", {{"normalizer", {{"type", "BertNormalizer"}}}}},
      {"decoder 'WordPiece'", {{"decoder", {{"type", "WordPiece"}, {"prefix", "##"}}}}},
      {"post-processor 'Weird'", {{"post_processor", {{"type", "Weird"}}}}},
  };
  for (const auto& [name, patch] : cases) {
    auto doc = minimal();
    doc.merge_patch(patch);
    const std::string e = error_of(doc);
    EXPECT_EQ(e.rfind(std::string(kUnsupportedTokenizer), 0), 0u) << e;
    EXPECT_NE(e.find(name + " is not supported natively"), std::string::npos) << e;
    EXPECT_NE(e.find("tokenizer.json"), std::string::npos) << e;
  }
}

TEST(TokenizerJson, DamagedFilesNameTheKey) {
  auto doc = minimal();
  doc["model"]["merges"] = {"a c"};
  std::string e = error_of(doc);
  EXPECT_NE(e.find("key 'model.merges[0]'"), std::string::npos) << e;
  EXPECT_NE(e.find("\"c\" is not"), std::string::npos) << e;
  EXPECT_EQ(e.rfind(std::string(kUnsupportedTokenizer), 0), std::string::npos) << e;

  doc = minimal();
  doc["model"]["merges"] = {"ab"};
  e = error_of(doc);
  EXPECT_NE(e.find("key 'model.merges[0]'"), std::string::npos) << e;

  doc = minimal();
  doc["model"]["vocab"]["b"] = -4;
  e = error_of(doc);
  EXPECT_NE(e.find("key 'model.vocab.b'"), std::string::npos) << e;

  doc = minimal();
  doc["pre_tokenizer"] = {{"type", "Split"},
                          {"pattern", {{"Regex", "(unclosed"}}},
                          {"behavior", "Isolated"},
                          {"invert", false}};
  e = error_of(doc);
  EXPECT_NE(e.find("does not compile"), std::string::npos) << e;

  doc = minimal();
  doc["pre_tokenizer"] = {{"type", "Split"},
                          {"pattern", {{"String", " "}}},
                          {"behavior", "Sideways"},
                          {"invert", false}};
  e = error_of(doc);
  EXPECT_NE(e.find("key 'pre_tokenizer.behavior'"), std::string::npos) << e;

  TempDir dir;
  testing::write_file(dir / "tokenizer.json", "{\"model\": ");
  try {
    load_tokenizer_json(dir / "tokenizer.json");
    ADD_FAILURE() << "a truncated file loaded";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("is not valid JSON"), std::string::npos) << err.what();
  }
}

TEST(TokenizerJson, DecodeRefusesIdsOutsideTheVocabulary) {
  TempDir dir;
  testing::write_file(dir / "tokenizer.json", minimal().dump());
  const auto tok = load_tokenizer_json(dir / "tokenizer.json");
  try {
    tok->decode({0, 7});
    ADD_FAILURE() << "id 7 decoded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 7 is outside the vocabulary"), std::string::npos)
        << e.what();
  }
}

TEST(TokenizerJson, AFolderWithoutATokenizerIsNamed) {
  TempDir dir;
  try {
    load_tokenizer(dir.path());
    ADD_FAILURE() << "an empty folder gave a tokenizer";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("has no tokenizer: expected tokenizer.json or tokenizer.model"),
        std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace gengraph
