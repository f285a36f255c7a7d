// Hostile and careless input, second pass (issue 25): one test per defect class
// (docs/reliability.md). Here: damaged AOTInductor packages (given and cached), what their loading
// leaves in /tmp, held locks, FIFOs in place of cache files, killed writers' temporaries and a full
// disk under the package cache. One real package is used: the one the conformance tests build for
// the tiny model in the default cache (built here if missing); every damaged one is a copy.
#include "tests/backends/hostile_caches_support.h"

namespace gengraph {
namespace {

using namespace hostile_caches;  // NOLINT: this file's helpers

// A package whose program is truncated or blanked inside a valid zip crashed the process that
// loaded it (SIGBUS, SIGSEGV): now each is refused before loading, naming the file and the fault,
// with its manifest (the SHA-256 of each file) or without (the program's ELF structure against its
// size). A zip that LibTorch's loader would unpack outside its folder, or a compressed one, is
// refused too; check_aoti_package says the same without a model.
TEST(HostileCaches, ADamagedPackageIsRefusedBeforeItIsLoaded) {
  TempDir dir;
  const auto m = tiny();
  const fs::path& good = good_package();
  EXPECT_NO_THROW(check_aoti_package(good));
  // The backend checks a given package's structure with its options, its checksums when it
  // loads it; check_aoti_package does both, checksums first.
  const std::string mismatch = "does not match the SHA-256 recorded when the package was made";
  struct Case {
    std::string mode, backend_says, check_says;
  };
  const std::vector<Case> cases = {
      {"truncate", "truncated", mismatch},
      {"zero", "is damaged: its dynamic section", mismatch},
      {"blank_middle", mismatch, mismatch},  // whole as an ELF file: only the checksum tells
      {"truncate+nomanifest", "truncated", "truncated"},
      {"zero+nomanifest", "is damaged: its dynamic section", "is damaged: its dynamic section"},
      {"deflate", "is compressed", "is compressed"},
      {"escape", "is not a relative path inside the package", "is not a relative path"},
  };
  for (const auto& c : cases) {
    const auto path = dir / (c.mode + ".pt2");
    rewrite_package(good, path, c.mode);
    const std::string err = error_of([&] { make("aoti", m, {{"package", path.string()}}); });
    EXPECT_THAT(
        err, HasSubstr("option 'package': AOTInductor package '" + path.string() + "' is damaged"))
        << c.mode;
    EXPECT_THAT(err, HasSubstr(c.backend_says)) << c.mode;
    EXPECT_THAT(error_of([&] { check_aoti_package(path); }), HasSubstr(c.check_says)) << c.mode;
  }
  // Cut short as a file, and zeroed in place (the zip's own checksums are then wrong).
  const auto cut = dir / "cut.pt2";
  fs::copy_file(good, cut);
  fs::resize_file(cut, fs::file_size(good) - 100);
  EXPECT_THAT(error_of([&] {
                make("aoti", m, {{"package", cut.string()}});
              }),
              HasSubstr("'" + cut.string() + "' is not a readable AOTInductor package"));
  // Through the CLI: exit 1 with the message, no signal.
  write_file(dir / "x.yaml",
             "model: {preset: gpt2-tiny, seed: 11}\nbackends: [{name: aoti, "
             "options: {package: '" +
                 (dir / "truncate.pt2").string() +
                 "'}}]\ninputs: {prompts: [[1, 2]]}\n"
                 "generation: {max_new_tokens: 2}\nrun: {warmup: 0, repeats: 1}\n");
  const auto [rc, err] = testing::cli_stderr(
      {"run", (dir / "x.yaml").string(), "--quiet", "--output", (dir / "o.json").string()});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("truncate.pt2' is damaged"));
}

// A package LibTorch's loader unpacks and then fails on (here: a device no runner serves) left its
// unpacked copy in /tmp, every time: now it is removed, and the error names the package.
TEST(HostileCaches, APackageThatFailsToLoadLeavesNothingInTmp) {
  TempDir dir;
  const auto path = dir / "bogus.pt2";
  rewrite_package(good_package(), path, "bogus_device+nomanifest");
  EXPECT_NO_THROW(check_aoti_package(path));  // it passes the checks: the loader itself fails
  const auto before = unpacked_copies();
  for (int i = 0; i < 2; ++i) {
    EXPECT_THAT(error_of([&] {
                  make("aoti", tiny(), {{"package", path.string()}});
                }),
                HasSubstr("package '" + path.string() + "' could not be loaded"));
  }
  for (const auto& d : copies_left_behind(before)) ADD_FAILURE() << "left behind: " << d;
  // A good package still loads, and its copy goes when the backend does.
  {
    auto b = make("aoti", tiny(), {{"package", good_package().string()}});
    EXPECT_EQ(first_tokens(*b).size(), 4u);
  }
  for (const auto& d : copies_left_behind(before)) ADD_FAILURE() << "left behind: " << d;
}

// A cached package damaged after it was built (its checksum is recorded beside it) is rebuilt; with
// no builder, refused with what to do.
TEST(HostileCaches, ADamagedCachedPackageIsRebuilt) {
  TempDir dir;
  CopyingBuilder builder;
  const auto m = tiny();
  const std::map<std::string, std::string> opts = {{"cache_dir", dir.path().string()}};
  const auto want = first_tokens(*make("eager", m));
  EXPECT_EQ(first_tokens(*make("aoti", m, opts)), want);
  EXPECT_EQ(builder.builds, 1);
  const fs::path cached = only_file_with_extension(dir.path(), ".pt2");
  ASSERT_FALSE(cached.empty());
  EXPECT_THAT(testing::read_file(cached.string() + ".build.json"), HasSubstr("\"sha256\""));

  // The program truncated inside a valid zip, as a disk or a careless copy may leave it.
  rewrite_package(good_package(), cached, "truncate");
  {
    CaptureCerr cerr;
    EXPECT_EQ(first_tokens(*make("aoti", m, opts)), want);
    EXPECT_THAT(cerr.text(), HasSubstr("is damaged"));
    EXPECT_THAT(cerr.text(), HasSubstr("rebuilding the cached package"));
  }
  EXPECT_EQ(builder.builds, 2);
  // Bytes overwritten in place: the whole file's checksum differs from the recorded one.
  {
    std::fstream f(cached, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(cached) / 2));
    f << std::string(64, '\0');
  }
  set_aoti_package_builder(nullptr, "hostile-copy");
  const std::string err = error_of([&] { make("aoti", m, opts); });
  EXPECT_THAT(err, HasSubstr("AOTInductor package '" + cached.string() + "' is damaged"));
  EXPECT_THAT(err, HasSubstr("remove it to rebuild it"));
}

// The JSON inside a package (the loader's metadata, gengraph's manifest) goes through the one
// typed reader: a wrong type, a missing key or text that is not JSON is named with the entry, the
// key, what was expected and what was found. Before, the manifest's refusals carried nlohmann's
// "[json.exception.type_error.302] type must be string, but is number" and its parse errors'
// texts, naming no key.
TEST(HostileCaches, APackagesJsonEntriesAreReadThroughTheOneTypedReader) {
  const fs::path seeds =
      fs::path(GENGRAPH_SOURCE_DIR) / "tests" / "fuzz" / "corpus" / "aoti_package";
  const std::string meta_entry = "pkg/data/aotinductor/model/m.wrapper_metadata.json";
  const std::string so_entry = "pkg/data/aotinductor/model/m.wrapper.so";
  const std::string manifest_entry = "pkg/gengraph/manifest.json";
  // The committed seed with a number among the metadata's strings.
  const fs::path not_strings = seeds / "metadata_not_strings";
  EXPECT_EQ(error_of([&] { check_aoti_package(not_strings); }),
            "AOTInductor package '" + not_strings.string() + "' is damaged: '" + meta_entry +
                "': key 'gengraph.layers': expected a string, found 2");

  TempDir dir;
  const fs::path out = dir / "p.pt2";
  auto refusal = [&](const std::string& entry, const std::string& text) {
    replace_entry(seeds / "valid", out, entry, text);
    return error_of([&] { check_aoti_package(out); });
  };
  const std::string damaged = "AOTInductor package '" + out.string() + "' is damaged: ";
  EXPECT_EQ(refusal(meta_entry, R"(["cpu"])"),
            damaged + "'" + meta_entry + "': expected an object of strings, found an array of 1 " +
                "entry");
  const std::string not_json = refusal(meta_entry, R"({"AOTI_DEVICE_KEY": )");
  EXPECT_THAT(not_json,
              ::testing::StartsWith(damaged + "'" + meta_entry + "' is not valid JSON: "));
  EXPECT_THAT(not_json, ::testing::EndsWith("unexpected end of input; expected '[', '{', or a "
                                            "literal at line 1, column 21"));
  EXPECT_THAT(not_json, Not(HasSubstr("json.exception")));

  const std::string manifest = damaged + "its manifest '" + manifest_entry + "': ";
  const std::string digest = "expected a SHA-256 digest (64 lower-case hex digits), found ";
  EXPECT_EQ(refusal(manifest_entry, R"({"format": 1, "sha256": {")" + so_entry + R"(": 3}})"),
            manifest + "key 'sha256." + so_entry + "': " + digest + "3");
  EXPECT_EQ(refusal(manifest_entry, R"({"format": 1, "sha256": {")" + so_entry + R"(": "ABC"}})"),
            manifest + "key 'sha256." + so_entry + "': " + digest + "the string \"ABC\"");
  EXPECT_EQ(refusal(manifest_entry, R"({"format": 1})"),
            manifest +
                "key 'sha256': expected an object of SHA-256 digests by entry name, found nothing "
                "(the key is missing)");
  EXPECT_EQ(refusal(manifest_entry, "[]"),
            manifest + "expected a gengraph package manifest (an object), found an array of 0 " +
                "entries");
  const std::string manifest_not_json = refusal(manifest_entry, "{\"format\": 1,\n\"sha256\": {");
  EXPECT_THAT(manifest_not_json, ::testing::StartsWith(damaged + "its manifest '" + manifest_entry +
                                                       "' is not valid JSON: "));
  EXPECT_THAT(manifest_not_json, ::testing::EndsWith(" at line 2, column 12"));

  // gengraph's own metadata, integers written as strings: the one form as well.
  replace_entry(seeds / "valid", out, meta_entry,
                R"({"AOTI_DEVICE_KEY": "cpu", "gengraph.format": "two\u001b[0m"})");
  EXPECT_EQ(error_of([&] { AotiMeta::read(out); }),
            "AOTInductor package '" + out.string() +
                "': metadata key 'gengraph.format': expected an integer (written as a string), "
                "found the string \"two\\u001b[0m\"");
}

// The package cache's build record (PACKAGE.build.json) goes through the one typed reader too. A
// damaged one was dropped in silence (nlohmann's type_error swallowed); now a warning names the
// record, the key, what was expected and what was found, the package is checked against its
// manifest instead, and a damaged package is still refused (here: rebuilt).
TEST(HostileCaches, ADamagedBuildRecordIsNamedAndTheManifestChecksInstead) {
  TempDir dir;
  CopyingBuilder builder;
  const auto m = tiny();
  const std::map<std::string, std::string> opts = {{"cache_dir", dir.path().string()}};
  make("aoti", m, opts);
  const fs::path cached = only_file_with_extension(dir.path(), ".pt2");
  ASSERT_FALSE(cached.empty());
  const fs::path record = cached.string() + ".build.json";
  {
    CaptureCerr cerr;
    EXPECT_EQ(make("aoti", m, opts)->report().at("aoti_compile_seconds"), 2.0);  // recorded
    EXPECT_EQ(cerr.text(), "");
  }
  const std::string warning = "gengraph: the package's build record '" + record.string() + "'";
  const std::string instead = "; checking the package against its own manifest instead\n";
  struct Case {
    std::string text, says;
  };
  const std::vector<Case> cases = {
      {R"({"export_seconds": "slow", "compile_seconds": 2})",
       ": key 'export_seconds': expected a number of seconds >= 0, found the string \"slow\""},
      {R"({"export_seconds": 1, "compile_seconds": -2})",
       ": key 'compile_seconds': expected a number of seconds >= 0, found -2"},
      {R"({"export_seconds": 1, "compile_seconds": 2, "sha256": 5})",
       ": key 'sha256': expected a SHA-256 digest (64 lower-case hex digits), found 5"},
      {R"({"export_seconds": 1})",
       ": key 'compile_seconds': expected a number of seconds >= 0, found nothing (the key is "
       "missing)"},
      {"[1]",
       ": expected an object (written when the package was built), found an array of 1 "
       "entry"},
      {R"({"export_seconds": 1e999})",
       " is not valid JSON: number overflow parsing '1e999' at line 1, column 24"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    write_file(record, c.text);
    CaptureCerr cerr;
    auto b = make("aoti", m, opts);
    EXPECT_EQ(without_unpack_waits(cerr.text()), warning + c.says + instead);
    EXPECT_EQ(b->report().at("aoti_compile_seconds"), 0.0);  // the figures are lost
  }
  // With the record damaged, the manifest still finds a damaged package.
  write_file(record, "[]");
  rewrite_package(good_package(), cached, "truncate");
  {
    CaptureCerr cerr;
    EXPECT_EQ(first_tokens(*make("aoti", m, opts)), first_tokens(*make("eager", m)));
    EXPECT_THAT(cerr.text(), HasSubstr(warning + ": expected an object"));
    EXPECT_THAT(cerr.text(), HasSubstr("is damaged"));
    EXPECT_THAT(cerr.text(), HasSubstr("rebuilding the cached package"));
  }
  EXPECT_EQ(builder.builds, 2);
  EXPECT_THAT(testing::read_file(record), HasSubstr("\"sha256\""));  // written anew
}

}  // namespace
}  // namespace gengraph
